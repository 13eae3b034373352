"""An example trainer written the way Paddle jobs usually are; it runs
unmodified under lifeboat (`lifeboat run -- python train.py`).

It fits a small linear model y = X.w + b by SGD with momentum (numpy when it
is importable, plain Python otherwise) and saves like a Paddle user does:

  * every --save-every steps a directory DIR/step-000100/ holding
    model.pdparams and model.pdopt (pickles, as paddle.save writes them);
  * the usual SIGTERM handler: save DIR/backup/latest.pdparams (and
    latest.pdopt) and exit 0.

DIR is --dir, else LIFEBOAT_DIR (lifeboat exports it), else ./ckpt. When
lifeboat restored a checkpoint, LIFEBOAT_RESUME_DIR says where (or, after
`lifeboat restore` in an init container, DIR/.lifeboat-resume.json does), and
training resumes from it, whichever of the two kinds it is.

With --use-helper the trainer uses the lifeboat Python helper instead of its
own signal handler: it polls lifeboat.stop_requested(), saves a last step
directory when asked to stop, and marks each step directory complete with
lifeboat.commit(), so lifeboat uploads it without waiting for it to settle.
"""

import argparse
import json
import os
import pickle
import random
import signal
import sys
import time

try:
    import numpy as np
except ImportError:  # the example must also run on a bare python image
    np = None

FEATURES = 8
TRUE_W = [0.5 * (i + 1) * (-1) ** i for i in range(FEATURES)]
TRUE_B = 1.0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=None, help="checkpoint directory (default: LIFEBOAT_DIR, else ./ckpt)")
    p.add_argument("--steps", type=int, default=int(os.environ.get("TRAIN_STEPS", "3000")), help="total steps (TRAIN_STEPS)")
    p.add_argument("--save-every", type=int, default=int(os.environ.get("TRAIN_SAVE_EVERY", "200")),
                   help="save a step directory every N steps (TRAIN_SAVE_EVERY)")
    p.add_argument("--step-time", type=float, default=float(os.environ.get("TRAIN_STEP_TIME", "0.01")),
                   help="seconds to sleep per step, standing in for the GPU (TRAIN_STEP_TIME)")
    p.add_argument("--pad-mb", type=float, default=float(os.environ.get("TRAIN_PAD_MB", "1")),
                   help="extra MiB written into model.pdparams, standing in for real tensors (TRAIN_PAD_MB)")
    p.add_argument("--use-helper", action="store_true", help="use the lifeboat helper: stop_requested() and commit()")
    return p.parse_args(argv)


class Model:
    """Linear regression with SGD and momentum; state is plain lists so a
    checkpoint loads with or without numpy."""

    def __init__(self):
        self.step = 0
        self.w = [0.0] * FEATURES
        self.b = 0.0
        self.vw = [0.0] * FEATURES  # optimizer state: momentum
        self.vb = 0.0
        self.loss = float("nan")

    def params(self):
        return {"step": self.step, "w": list(self.w), "b": self.b, "loss": self.loss}

    def opt(self):
        return {"step": self.step, "vw": list(self.vw), "vb": self.vb}

    def load(self, params, opt):
        if opt is not None and opt.get("step") != params["step"]:
            raise ValueError("optimizer state is for step %s, parameters for step %s" % (opt.get("step"), params["step"]))
        self.step, self.w, self.b = params["step"], list(params["w"]), params["b"]
        self.loss = params.get("loss", float("nan"))
        if opt is not None:
            self.vw, self.vb = list(opt["vw"]), opt["vb"]

    def train_step(self, rng, lr=0.02, mu=0.9, batch=16):
        xs = [[rng.uniform(-1, 1) for _ in range(FEATURES)] for _ in range(batch)]
        ys = [sum(a * t for a, t in zip(x, TRUE_W)) + TRUE_B for x in xs]
        if np is not None:
            X, Y, w = np.array(xs), np.array(ys), np.array(self.w)
            err = X @ w + self.b - Y
            gw, gb = (X.T @ err / batch).tolist(), float(err.mean())
            self.loss = float((err ** 2).mean())
        else:
            errs = [sum(a * c for a, c in zip(x, self.w)) + self.b - y for x, y in zip(xs, ys)]
            gw = [sum(e * x[i] for e, x in zip(errs, xs)) / batch for i in range(FEATURES)]
            gb = sum(errs) / batch
            self.loss = sum(e * e for e in errs) / batch
        self.vw = [mu * v + g for v, g in zip(self.vw, gw)]
        self.vb = mu * self.vb + gb
        self.w = [c - lr * v for c, v in zip(self.w, self.vw)]
        self.b -= lr * self.vb
        self.step += 1


def save(model, path, name, pad_bytes):
    """Saves like paddle.save: one pickle per state dict, written in place."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name + ".pdparams"), "wb") as f:
        # The random bytes stand in for the tensors, inside the one pickle.
        pickle.dump(dict(model.params(), tensors=os.urandom(pad_bytes)), f, protocol=4)
    with open(os.path.join(path, name + ".pdopt"), "wb") as f:
        pickle.dump(model.opt(), f)


def load(path):
    """Loads a checkpoint directory of either kind (step-N/model.* or
    backup/latest.*); returns (params, opt)."""
    for name in ("model", "latest"):
        p = os.path.join(path, name + ".pdparams")
        if os.path.exists(p):
            with open(p, "rb") as f:
                params = pickle.load(f)
            opt = None
            o = os.path.join(path, name + ".pdopt")
            if os.path.exists(o):
                with open(o, "rb") as f:
                    opt = pickle.load(f)
            return params, opt
    raise FileNotFoundError("no model.pdparams or latest.pdparams in %s" % path)


def find_resume(ckpt_dir, helper):
    """Where lifeboat restored a checkpoint, or None for a fresh start."""
    if helper is not None:
        return helper.resume_dir(ckpt_dir)
    d = os.environ.get("LIFEBOAT_RESUME_DIR")
    if d:
        return d
    # After `lifeboat restore` in an init container.
    try:
        with open(os.path.join(ckpt_dir, ".lifeboat-resume.json")) as f:
            return json.load(f)["dir"]
    except FileNotFoundError:
        return None


def main(argv):
    args = parse_args(argv)
    helper = None
    if args.use_helper:
        import lifeboat as helper

        helper.install_stop_handler()
    ckpt_dir = args.dir or os.environ.get("LIFEBOAT_DIR") or "ckpt"
    pad = int(args.pad_mb * (1 << 20))
    model = Model()

    resume = find_resume(ckpt_dir, helper)
    if resume:
        model.load(*load(resume))
        print("trainer: resumed from %s at step %d (loss %.4g)" % (resume, model.step, model.loss), flush=True)
    else:
        print("trainer: no checkpoint in %s, starting from step 0" % ckpt_dir, flush=True)

    def save_step_dir():
        path = os.path.join(ckpt_dir, "step-%06d" % model.step)
        save(model, path, "model", pad)
        if helper is not None:
            helper.commit(path, model.step)
        return path

    if helper is None:
        # The recipe most teams copy: save on SIGTERM and exit 0.
        def on_term(signum, frame):
            save(model, os.path.join(ckpt_dir, "backup"), "latest", pad)
            print("trainer: SIGTERM at step %d: saved backup/latest.pdparams, exiting 0" % model.step, flush=True)
            sys.exit(0)

        signal.signal(signal.SIGTERM, on_term)

    rng = random.Random(model.step)
    while model.step < args.steps:
        if helper is not None and helper.stop_requested():
            path = save_step_dir()
            print("trainer: stop requested at step %d: saved and committed %s, exiting 0" % (model.step, path), flush=True)
            return 0
        model.train_step(rng)
        if model.step % args.save_every == 0:
            path = save_step_dir()
            print("trainer: step %d: saved %s (loss %.4g)" % (model.step, os.path.basename(path), model.loss), flush=True)
        time.sleep(args.step_time)
    print("trainer: done at step %d (loss %.4g, w=%s, b=%.3f)" % (model.step, model.loss, ["%.2f" % c for c in model.w], model.b), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
