"""One rank of a data-parallel job that steps in lockstep with its peers
(standard library only, with images/lifeboat.py on PYTHONPATH).

    python3 lockstep.py MODE
      handler   its own SIGTERM handler sets a flag; at the end of the step
                it saves that step and exits 0 (what most trainers do)
      stopstep  on lifeboat.stop_requested() it asks lifeboat.stop_step()
                for the step every rank saves, trains up to it, saves it and
                exits 0

A step runs with SIGTERM and SIGUSR1 blocked, as a step's CUDA kernels and
NCCL collectives run in C++ where a Python handler cannot run: a signal
that arrives during a step is handled at its end. Each step ends in a
barrier over files in BARRIER_DIR (one per round of processes) that blocks
like a collective: a rank waits until every rank has reached the step, and
a rank whose peer is gone waits forever.

While BARRIER_DIR/hold-rank-R exists, rank R waits at the end of its step
(emitting "held"), handling signals, as a rank that is slower than its
peers: they go on into the next step's collective and wait for it there.

Every SAVE_EVERY steps (5) the rank saves step-NNNNNN/ and commits it with
lifeboat.commit. A step takes STEP_SECONDS (0.1). Events are JSON lines on
stdout; a resumed rank checks that what it loads is what it saved.
"""
import hashlib
import json
import os
import pickle
import signal
import sys
import time

import lifeboat

MODE = sys.argv[1]
RANK = int(os.environ["LIFEBOAT_RANK"])
WORLD = int(os.environ["LIFEBOAT_WORLD_SIZE"])
ROOT = os.environ["LIFEBOAT_DIR"]
BARRIER = os.environ["BARRIER_DIR"]
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.1"))
EVERY = int(os.environ.get("SAVE_EVERY", "5"))


def emit(**kv):
    kv["rank"] = RANK
    print(json.dumps(kv), flush=True)


def model_bytes(step):
    seed = hashlib.sha256(b"%d/%d" % (RANK, step)).digest()
    return seed * 64


def save(step):
    path = os.path.join(ROOT, "step-%06d" % step)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "model.pdparams"), "wb") as f:
        pickle.dump(model_bytes(step), f, protocol=4)
    with open(os.path.join(path, "state.json"), "w") as f:
        json.dump({"step": step, "rank": RANK}, f)
    lifeboat.commit(path, step)
    emit(event="saved", step=step)


def load(path):
    with open(os.path.join(path, "state.json")) as f:
        state = json.load(f)
    with open(os.path.join(path, "model.pdparams"), "rb") as f:
        ok = pickle.load(f) == model_bytes(state["step"]) and state["rank"] == RANK
    return state["step"], ok


def reached(rank):
    try:
        with open(os.path.join(BARRIER, "rank-%d" % rank)) as f:
            return int(f.read() or "0")
    except (OSError, ValueError):
        return 0


def barrier(step):
    tmp = os.path.join(BARRIER, ".rank-%d.tmp" % RANK)
    with open(tmp, "w") as f:
        f.write(str(step))
    os.replace(tmp, os.path.join(BARRIER, "rank-%d" % RANK))
    while any(reached(r) < step for r in range(WORLD)):
        time.sleep(0.005)


STOP_SIGNALS = {signal.SIGTERM, signal.SIGUSR1}


def train(step):
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    time.sleep(STEP_SECONDS)
    barrier(step)
    emit(event="step", step=step)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def stopping():
    return stop if MODE == "handler" else lifeboat.stop_requested()


def hold(step):
    held = False
    while os.path.exists(os.path.join(BARRIER, "hold-rank-%d" % RANK)) and not stopping():
        if not held:
            emit(event="held", step=step)
            held = True
        time.sleep(0.005)


stop = False


def on_term(signum, frame):
    global stop
    stop = True


step = 0
resumed = os.environ.get("LIFEBOAT_RESUME_DIR", "")
if resumed:
    step, ok = load(resumed)
    emit(event="resumed", step=step, verified=ok, lifeboat_step=os.environ.get("LIFEBOAT_RESUME_STEP"))
if MODE == "handler":
    signal.signal(signal.SIGTERM, on_term)
else:
    lifeboat.install_stop_handler()
emit(event="started", step=step)

while True:
    step += 1
    train(step)
    hold(step)
    if MODE == "handler":
        if stop or step % EVERY == 0:
            save(step)
        if stop:
            emit(event="stopped", step=step)
            sys.exit(0)
        continue
    if step % EVERY == 0:
        save(step)
    if lifeboat.stop_requested():
        target = lifeboat.stop_step(step, timeout=60)
        emit(event="stop_step", step=step, target=target)
        saved = step % EVERY == 0
        while step < target:
            step += 1
            train(step)
            saved = False
        if not saved:
            save(step)
        emit(event="stopped", step=step)
        sys.exit(0)
