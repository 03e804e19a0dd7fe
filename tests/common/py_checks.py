"""What the Python tests that print a line per check share (merge_weights_test.py,
accelerate_files_test.py): check() prints "ok" or "FAIL" with the detail indented and keeps the
failures; clean_up() removes the test's scratch directory, or keeps it (and says where) for a look
at what failed; finish() prints the count and exits 1 when any failed, else 0."""
import shutil
import sys

failures = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
        if detail:
            print("    " + detail.replace("\n", "\n    "))


def clean_up(work):
    if not failures:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")


def finish():
    print(f"{len(failures)} failure(s)" if failures else "all passed")
    sys.exit(1 if failures else 0)
