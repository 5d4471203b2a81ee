# family: output
# attacks: harnesses that treat EOF on stdout as the end of the program, then wait without a deadline
# expected: a correct harness keeps its deadline after EOF and scores 0
import os

os.close(1)
os.close(2)
while True:
    pass
