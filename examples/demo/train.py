"""A toy trainer written the way many Paddle jobs are, unmodified for lifeboat.

It fits y = 3x + 1 with plain Python, saves a checkpoint directory every 100
steps (step-000100/model.pdparams), and has the hand-written SIGTERM handler
most teams use: save backup/latest.pdparams and exit 0. When lifeboat
restored a checkpoint, LIFEBOAT_RESUME_DIR says where, and it resumes there.
"""
import os
import pickle
import random
import signal
import sys
import time

ckpt_dir = os.environ.get("LIFEBOAT_DIR", "ckpt")
total = int(os.environ.get("DEMO_STEPS", "600"))
state = {"step": 0, "w": 0.0, "b": 0.0}


def save(path):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "model.pdparams"), "wb") as f:
        # One pickle per file, as paddle.save writes it; the random bytes
        # stand in for the tensors (2 MiB).
        pickle.dump(dict(state, tensors=os.urandom(2 << 20)), f, protocol=4)


resume = os.environ.get("LIFEBOAT_RESUME_DIR")
if resume:
    with open(os.path.join(resume, "model.pdparams"), "rb") as f:
        state = pickle.load(f)
    print(f"trainer: resumed from {resume} at step {state['step']} (w={state['w']:.3f} b={state['b']:.3f})", flush=True)
else:
    print("trainer: no checkpoint, starting from step 0", flush=True)


def on_term(signum, frame):
    save(os.path.join(ckpt_dir, "backup"))
    print(f"trainer: SIGTERM at step {state['step']}: saved backup/latest.pdparams, exiting 0", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
rng = random.Random(state["step"])
while state["step"] < total:
    x = rng.uniform(-1, 1)
    err = state["w"] * x + state["b"] - (3 * x + 1)
    state["w"] -= 0.05 * err * x
    state["b"] -= 0.05 * err
    state["step"] += 1
    if state["step"] % 100 == 0:
        save(os.path.join(ckpt_dir, f"step-{state['step']:06d}"))
        print(f"trainer: step {state['step']}: saved step-{state['step']:06d}/ (w={state['w']:.3f} b={state['b']:.3f})", flush=True)
    time.sleep(0.005)
print(f"trainer: done at step {state['step']} (w={state['w']:.3f} b={state['b']:.3f})", flush=True)
