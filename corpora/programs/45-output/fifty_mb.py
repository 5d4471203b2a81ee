# family: output
# attacks: harnesses that read output through a small pipe without draining it: 50 MB at once
# expected: a correct harness drains or discards output while waiting and scores 0
print("x" * 50_000_000)
