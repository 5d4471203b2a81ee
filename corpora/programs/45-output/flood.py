# family: output
# attacks: harnesses that buffer all output: gigabytes written to stdout
# expected: a correct harness bounds what it keeps, kills at the deadline and scores 0
import sys

chunk = "x" * 65536
while True:
    sys.stdout.write(chunk)
