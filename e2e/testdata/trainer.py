"""A stdlib-only trainer stand-in that saves checkpoints the ways real
Paddle jobs do, and resumes from what lifeboat restored.

    python3 trainer.py MODE
      dirs    a new directory per checkpoint: $LIFEBOAT_DIR/step-000025/
      backup  only on SIGTERM, in place: $LIFEBOAT_DIR/backup/latest.pdparams
      marker  $LIFEBOAT_DIR/ckpt/ rewritten, then the marker file with the step

With TRAINER_CRASH_AFTER=N, a trainer that did not resume exits 1 after its
Nth save, as a crash (NCCL timeout, segfault) would. TRAINER_SAVE_SECONDS
makes the SIGTERM save of backup mode take that long; TRAINER_ON_USR1=save
saves backup on SIGUSR1 and keeps training.

Every event is one JSON line on stdout. The "model" is bytes derived from
the step, so a resumed trainer can check it got exactly what was saved.
"""
import hashlib
import json
import os
import pickle
import signal
import sys
import time

MODE = sys.argv[1]
EVERY = int(os.environ.get("TRAINER_EVERY", "25"))
SIZE = int(os.environ.get("TRAINER_MODEL_BYTES", str(300 * 1024)))
root = os.environ["LIFEBOAT_DIR"]
marker = os.environ.get("LIFEBOAT_MARKER", ".lifeboat-commit")


def emit(**kv):
    print(json.dumps(kv), flush=True)


def model_bytes(step):
    seed = hashlib.sha256(str(step).encode()).digest()
    return (seed * (SIZE // len(seed) + 1))[:SIZE]


def save(path, step):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "model.pdparams"), "wb") as f:
        pickle.dump(model_bytes(step), f, protocol=4)  # as paddle.save writes
    with open(os.path.join(path, "state.json"), "w") as f:
        json.dump({"step": step}, f)


def load(path):
    with open(os.path.join(path, "state.json")) as f:
        step = json.load(f)["step"]
    with open(os.path.join(path, "model.pdparams"), "rb") as f:
        ok = pickle.load(f) == model_bytes(step)
    return step, ok


step = 0
resume_dir = os.environ.get("LIFEBOAT_RESUME_DIR", "")
if resume_dir:
    step, ok = load(resume_dir)
    emit(event="resumed", step=step, verified=ok, dir=resume_dir,
         lifeboat_step=os.environ.get("LIFEBOAT_RESUME_STEP"))
else:
    emit(event="fresh")


SAVE_SECONDS = float(os.environ.get("TRAINER_SAVE_SECONDS", "0"))


def on_term(signum, frame):
    if MODE == "backup":
        time.sleep(SAVE_SECONDS)  # a save that takes a while, as a real one does
        save(os.path.join(root, "backup"), step)
    emit(event="terminated", step=step)
    sys.exit(0)


def on_usr1(signum, frame):
    # "Save now" (--notice-signal USR1): save and keep training.
    save(os.path.join(root, "backup"), step)
    emit(event="saved_now", step=step)


signal.signal(signal.SIGTERM, on_term)
if os.environ.get("TRAINER_ON_USR1") == "save":
    signal.signal(signal.SIGUSR1, on_usr1)
crash_after = int(os.environ.get("TRAINER_CRASH_AFTER", "0"))
saves = 0
while True:
    step += 1
    time.sleep(0.01)
    if step % EVERY:
        continue
    if MODE == "dirs":
        save(os.path.join(root, "step-%06d" % step), step)
    elif MODE == "marker":
        d = os.path.join(root, "ckpt")
        m = os.path.join(d, marker)
        if os.path.exists(m):
            os.remove(m)
        save(d, step)
        with open(m + ".tmp", "w") as f:
            f.write(str(step))
        os.rename(m + ".tmp", m)
    emit(event="saved", step=step)
    saves += 1
    if crash_after and not resume_dir and saves == crash_after:
        emit(event="crashed", step=step)
        os._exit(1)
