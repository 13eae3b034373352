#!/usr/bin/python3
"""A trainer that saves real PyTorch checkpoints into $LIFEBOAT_DIR, for the
tests of formats known by their content (torch_test.go). Each step STEP is
step-STEP/ (six digits) holding:

  model.pt             torch.save(..., _use_new_zipfile_serialization=False)
  dcp/                 torch 1.13's distributed checkpoint (save_state_dict
                       with FileSystemWriter, single_file_per_rank=True):
                       __0_0.distcp (torch.save zips back to back), .metadata
  trainer_state.json   json.dump with NaN, as Hugging Face's Trainer writes
                       after an fp16 overflow

Modes (the first argument):
  train ON_TERM   save step 100, print {"event": "idle"} and wait for
                  SIGTERM; then, with ON_TERM "save", save step 200 and exit
                  0; with "killed", write the first half of step 200's
                  model.pt and SIGKILL itself
  load            load the step $LIFEBOAT_RESUME_STEP under $LIFEBOAT_DIR
                  with torch.load and load_state_dict, check every value,
                  and print {"event": "loaded", "step": STEP}
Every tensor is a function of the step, so a load can check it.
"""

import copy
import dataclasses
import io
import json
import os
import signal
import sys
import time

# torch 1.13's torch.distributed._shard declares a dataclass field with a
# mutable default, which Python 3.11's dataclasses refuses: turn such
# defaults into default factories before the import.
_get_field = dataclasses._get_field


def _get_field_patched(cls, name, typ, *rest):
    d = cls.__dict__.get(name, dataclasses.MISSING)
    if isinstance(d, dataclasses.Field):
        if d.default is not dataclasses.MISSING and type(d.default).__hash__ is None:
            v = d.default
            d.default, d.default_factory = dataclasses.MISSING, (lambda v=v: copy.deepcopy(v))
    elif d is not dataclasses.MISSING and type(d).__hash__ is None:
        setattr(cls, name, dataclasses.field(default_factory=lambda d=d: copy.deepcopy(d)))
    return _get_field(cls, name, typ, *rest)


dataclasses._get_field = _get_field_patched

import torch  # noqa: E402
import torch.distributed._shard.checkpoint as dcp  # noqa: E402


def emit(**kw):
    print(json.dumps(kw), flush=True)


def tensors(step):
    g = torch.Generator().manual_seed(step)
    return {"w": torch.randn(256, 64, generator=g), "b": torch.arange(step, step + 8, dtype=torch.int64),
            "h": torch.full((16,), float(step), dtype=torch.float16)}


def step_dir(step):
    return os.path.join(os.environ["LIFEBOAT_DIR"], "step-%06d" % step)


def legacy_bytes(step):
    buf = io.BytesIO()
    torch.save({"model": tensors(step), "step": step}, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


def save(step):
    d = step_dir(step)
    os.makedirs(d, exist_ok=True)
    torch.save({"model": tensors(step), "step": step}, os.path.join(d, "model.pt"),
               _use_new_zipfile_serialization=False)
    dcp.save_state_dict(dict(tensors(step), step=step),
                        dcp.FileSystemWriter(os.path.join(d, "dcp"), single_file_per_rank=True), no_dist=True)
    with open(os.path.join(d, "trainer_state.json"), "w") as f:
        json.dump({"global_step": step, "log_history": [{"grad_norm": float("nan"), "loss": 0.5}]}, f, indent=2)


def load():
    step = int(os.environ["LIFEBOAT_RESUME_STEP"])
    d = step_dir(step)
    want = tensors(step)
    legacy = torch.load(os.path.join(d, "model.pt"))
    assert legacy["step"] == step
    for k, v in want.items():
        assert torch.equal(legacy["model"][k], v), k
    back = {k: torch.zeros_like(v) for k, v in want.items()}
    back["step"] = 0
    dcp.load_state_dict(back, dcp.FileSystemReader(os.path.join(d, "dcp")), no_dist=True)
    assert back["step"] == step
    for k, v in want.items():
        assert torch.equal(back[k], v), k
    with open(os.path.join(d, "trainer_state.json")) as f:
        assert json.load(f)["global_step"] == step
    emit(event="loaded", step=step)


def train(on_term):
    save(100)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    emit(event="idle")
    while not stop:
        time.sleep(0.05)
    if on_term == "save":
        save(200)
        sys.exit(0)
    d = step_dir(200)
    os.makedirs(d, exist_ok=True)
    b = legacy_bytes(200)
    with open(os.path.join(d, "model.pt"), "wb") as f:
        f.write(b[: len(b) // 2])
        f.flush()
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1] == "train":
        train(sys.argv[2])
    else:
        load()
