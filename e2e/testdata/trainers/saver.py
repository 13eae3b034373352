"""A scripted trainer for the whole-checkpoint tests: it saves, tears,
kills itself and reports what it was restored, as its argument list says.

    python3 saver.py PROGRAM [| PROGRAM ...]

A PROGRAM is a list of actions run in order. With several programs
separated by "|", the Nth start of the trainer (counted in
$TRAINER_CTL/attempts, for --restart on-failure) runs the Nth program, the
last one once they run out. The actions after "on-term" in a program are
its SIGTERM handler's.

    report              print one JSON line: LIFEBOAT_RESUME_*, and for each
                        file under $LIFEBOAT_DIR its SHA-256, whether it is
                        under LIFEBOAT_RESUME_DIR and, for a pickle, whether
                        pickle.load reads it whole
    save PATH STEP      write the pickle of STEP to PATH, as paddle.save
                        does (truncate and write in place, no rename)
    torn PATH STEP      write the first half of that pickle and stop,
                        leaving the file open (a save cut short)
    raw PATH BYTES      write BYTES bytes of a raw (unchecked) format
    rawtorn PATH BYTES  write the first half of them, leaving the file open
    part PATH BYTES     append BYTES random bytes to PATH (opened and
                        truncated by the first part, then left open), as a
                        save written front to back does; flushed
    rewrite PATH OFF BYTES  overwrite BYTES bytes of PATH, opened by part,
                        at offset OFF with other random bytes (pwrite): a
                        writer going back over what it wrote
    closeall            close the files left open
    append PATH TEXT    append a line to a text file (a log)
    mark DIR STEP       write the marker file (commit()'s, $LIFEBOAT_MARKER)
                        into DIR, naming STEP, atomically
    symlink TARGET PATH create a symbolic link
    mkfifo PATH         create a named pipe
    wait NAME           print {"event":"waiting","name":NAME}, then wait
                        until the test creates $TRAINER_CTL/NAME
    idle                print {"event":"idle"} and train until stopped
    hangchild           start a child that ignores TERM and wait for it
                        (a DataLoader worker that hangs)
    kill9               SIGKILL this process
    raise               raise an exception (exit 1)
    exit CODE           exit with CODE

PATHs are relative to $LIFEBOAT_DIR. A pickle holds the step and weights
derived from it (numpy arrays where numpy is installed, bytes otherwise),
so a reader can tell a whole file of the right step from anything else.
"""
import hashlib
import json
import os
import pickle
import signal
import subprocess
import sys
import time

try:
    import numpy
except ImportError:
    numpy = None

ROOT = os.environ.get("LIFEBOAT_DIR", ".")
CTL = os.environ.get("TRAINER_CTL", ".")
SIZE = int(os.environ.get("TRAINER_PICKLE_BYTES", str(1 << 20)))
MARKER = os.environ.get("LIFEBOAT_MARKER", ".lifeboat-commit")
PICKLES = (".pdparams", ".pdopt", ".pkl")
open_files = []
parts = {}  # PATH -> the file part writes to


def emit(**kv):
    print(json.dumps(kv), flush=True)


def weights(step):
    seed = hashlib.sha256(b"weights %d" % step).digest()
    return (seed * (SIZE // len(seed) + 1))[:SIZE]


def pickle_bytes(step):
    w = weights(step)
    if numpy is not None:
        w = numpy.frombuffer(w, dtype=numpy.float32).reshape(-1, 64)
    return pickle.dumps({"step": step, "linear.weight": w, "lr": 0.1}, protocol=4)


def raw_bytes(n):
    seed = hashlib.sha256(b"raw").digest()
    return (seed * (n // len(seed) + 1))[:n]


def check_pickle(path):
    """Load path and check its weights match its step."""
    try:
        with open(path, "rb") as f:
            obj = pickle.load(f)
            if f.read(1):
                return "error: bytes after the pickle", -1
        step = obj["step"]
        w = obj["linear.weight"]
        if numpy is not None and hasattr(w, "tobytes"):
            w = w.tobytes()
        if w != weights(step):
            return "error: weights do not match step %d" % step, step
        return "ok", step
    except Exception as e:  # the point: what a trainer's load would raise
        return "error: %s: %s" % (type(e).__name__, e), -1


def report():
    files = {}
    resume_dir = os.environ.get("LIFEBOAT_RESUME_DIR", "")
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if not x.startswith(".lifeboat-")]
        for name in names:
            p = os.path.join(d, name)
            rel = os.path.relpath(p, ROOT)
            if name.startswith(".lifeboat-") or not os.path.isfile(p) or os.path.islink(p):
                continue
            with open(p, "rb") as f:
                info = {"sha256": hashlib.sha256(f.read()).hexdigest(), "size": os.path.getsize(p)}
            info["resumed"] = bool(resume_dir) and (p + os.sep).startswith(os.path.join(resume_dir, ""))
            if name.endswith(PICKLES):
                info["load"], info["step"] = check_pickle(p)
            files[rel] = info
    emit(event="report", lifeboat_step=os.environ.get("LIFEBOAT_RESUME_STEP", ""),
         dir=os.environ.get("LIFEBOAT_RESUME_DIR", ""), files=files, attempt=attempt)


def path(p):
    p = os.path.join(ROOT, p)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    return p


def write(p, data, whole):
    f = open(path(p), "wb")
    if whole:
        f.write(data)
        f.close()
        return
    f.write(data[: len(data) // 2])
    f.flush()
    open_files.append(f)


def wait(name):
    emit(event="waiting", name=name)
    while not os.path.exists(os.path.join(CTL, name)):
        time.sleep(0.01)


def run(actions):
    i = 0
    while i < len(actions):
        a = actions[i]
        args = actions[i + 1:]
        if a == "report":
            report()
        elif a == "save":
            write(args[0], pickle_bytes(int(args[1])), True)
            i += 2
        elif a == "torn":
            write(args[0], pickle_bytes(int(args[1])), False)
            i += 2
        elif a == "raw":
            write(args[0], raw_bytes(int(args[1])), True)
            i += 2
        elif a == "rawtorn":
            write(args[0], raw_bytes(int(args[1])), False)
            i += 2
        elif a == "part":
            f = parts.get(args[0])
            if f is None:
                f = parts[args[0]] = open(path(args[0]), "wb")
                open_files.append(f)
            f.write(os.urandom(int(args[1])))
            f.flush()
            i += 2
        elif a == "rewrite":
            os.pwrite(parts[args[0]].fileno(), os.urandom(int(args[2])), int(args[1]))
            i += 3
        elif a == "closeall":
            for f in open_files:
                f.close()
            open_files.clear()
            parts.clear()
        elif a == "append":
            with open(path(args[0]), "a") as f:
                f.write(args[1] + "\n")
            i += 2
        elif a == "mark":
            m = path(os.path.join(args[0], MARKER))
            with open(m + ".tmp", "w") as f:
                f.write(args[1])
            os.rename(m + ".tmp", m)
            i += 2
        elif a == "symlink":
            os.symlink(args[0], path(args[1]))
            i += 2
        elif a == "mkfifo":
            os.mkfifo(path(args[0]))
            i += 1
        elif a == "wait":
            wait(args[0])
            i += 1
        elif a == "idle":
            emit(event="idle")
            while True:
                time.sleep(0.02)
        elif a == "hangchild":
            subprocess.run(["sh", "-c", "trap '' TERM; exec sleep 3600"])
        elif a == "kill9":
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        elif a == "raise":
            raise RuntimeError("save failed: No space left on device")
        elif a == "exit":
            sys.stdout.flush()
            sys.exit(int(args[0]))
        else:
            sys.exit("saver.py: unknown action %r" % a)
        i += 1


programs = [[]]
for a in sys.argv[1:]:
    if a == "|":
        programs.append([])
    else:
        programs[-1].append(a)

attempt = 1
counter = os.path.join(CTL, "attempts")
if os.path.isdir(CTL) and os.environ.get("TRAINER_CTL"):
    try:
        with open(counter) as f:
            attempt = int(f.read()) + 1
    except FileNotFoundError:
        pass
    with open(counter, "w") as f:
        f.write(str(attempt))
program = programs[min(attempt, len(programs)) - 1]
main, handler = program, []
if "on-term" in program:
    k = program.index("on-term")
    main, handler = program[:k], program[k + 1:]


def on_term(signum, frame):
    emit(event="terminated")
    run(handler)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
run(main)
