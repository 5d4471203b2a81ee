# family: memory
# attacks: harnesses without a memory limit: 16 MiB blocks, every page touched, until memory runs out
# expected: a correct harness limits memory (MemoryError or a kill) and scores 0
blocks = []
while True:
    block = bytearray(1 << 24)
    block[::4096] = b"x" * 4096
    blocks.append(block)
