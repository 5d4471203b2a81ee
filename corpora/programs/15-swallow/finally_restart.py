# family: swallow
# attacks: timeouts delivered as exceptions: every finally starts the loop again
# expected: a correct harness kills the process and scores 0


def spin() -> None:
    try:
        while True:
            pass
    finally:
        spin()


while True:
    try:
        spin()
    except BaseException:
        continue
