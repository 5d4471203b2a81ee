# family: process-exit
# attacks: harnesses that exec in their own process: a segfault through ctypes
# expected: a correct harness runs the program in a child, reports the crash and scores 0
import ctypes

ctypes.string_at(0)
