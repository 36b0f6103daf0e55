"""METEOR's Java process under control: scored within a time limit, then stopped and reaped, whatever happened.

pycocoevalcap's `Meteor` starts a Java subprocess and talks to it under a lock; if Java is missing, fails or hangs,
`meteor_score` reports METEOR as missing (NaN) with a warning after at most its timeout, and the process is killed
and reaped, so nothing is left to block garbage collection or exit.
"""

import contextlib
import subprocess
import threading
import warnings

from pycocoevalcap.meteor.meteor import Meteor


def meteor_score(references: dict[int, list[str]], candidates: dict[int, list[str]], *, timeout: float) -> float:
    """pycocoevalcap's METEOR of `candidates` against `references` (tokenised, {image_id: [caption]}), or NaN with a
    warning when its Java process is missing, fails, or gives no answer within `timeout` seconds."""
    result: list[float] = []
    scorer: list[Meteor] = []
    failure: list[str] = []

    def run() -> None:
        try:
            scorer.append(Meteor.__new__(Meteor))  # held before __init__ starts Java, so `_stop_meteor` sees it
            scorer[0].__init__()
            result.append(scorer[0].compute_score(references, candidates)[0])
        except Exception as error:  # Java missing or crashed: reported below
            failure.append(f"{error.__class__.__name__}: {error}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    answer, hung = list(result), thread.is_alive()  # before stopping Java: a hung call then fails or ends, and
    if scorer:  # that is no answer
        _stop_meteor(scorer[0])
    if answer:
        return answer[0]
    reason = f"no answer within {timeout:g} s" if hung or not failure else failure[0]
    warnings.warn(f"METEOR is missing ({reason}): its Java subprocess failed or timed out (is Java 17 installed?)")
    return float("nan")


class _StoppedMeteor:
    """What a METEOR scorer becomes once `_stop_meteor` has ended its Java process: nothing left to run at exit."""


def _stop_meteor(scorer: Meteor) -> None:
    """End METEOR's Java process now and reap it, then disarm pycocoevalcap's `Meteor.__del__`: that one waits for a
    lock a failed or hung scoring call never releases (garbage collection then blocks forever), leaves a killed
    process unreaped (a defunct `java`), and raises "Exception ignored" on a scorer whose Java never started."""
    process = getattr(scorer, "meteor_p", None)
    if process is not None:
        process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # one that cannot even be reaped: nothing more to do
            process.wait(timeout=10)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
    scorer.__class__ = _StoppedMeteor
