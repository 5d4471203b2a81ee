# family: process-exit
# attacks: harnesses that exec in their own process: os.abort() kills it with SIGABRT
# expected: a correct harness runs the program in a child, reports the crash and scores 0
import os

os.abort()
