#!/usr/bin/python3
"""Saves checkpoints the way real trainers do, with the real libraries,
into the directory given as the only argument (format's tests run it at
test time; nothing it writes is committed):

  legacy.pt, legacy_p4.pt   torch.save(..., _use_new_zipfile_serialization=False),
                            pickle protocols 2 (torch's default) and 4
  zip.pt                    torch.save (the zip format)
  dist/                     torch's distributed checkpoint (save_state_dict
                            with FileSystemWriter): one .distcp per item
  dist1/                    the same with single_file_per_rank=True: the
                            items back to back in one .distcp
  arr.npy, arrays.npz, arrays_z.npz, two.npy
                            np.save, np.savez, np.savez_compressed, and
                            np.save twice on one file
  p2.pkl .. p5.pkl          pickle.dump of a state-like dict, protocols 2-5
  multi.pkl                 three pickle.dump calls on one file
  trainer_state.json        json.dump with NaN, Infinity and -Infinity
  metrics.json              JSON Lines
  config.json               JSON with a UTF-8 byte-order mark
  extra.json                empty
"""

import copy
import dataclasses
import io
import json
import os
import pickle
import sys

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

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed._shard.checkpoint as dcp  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
opt = torch.optim.Adam(model.parameters())
model(torch.randn(2, 16)).sum().backward()
opt.step()
state = {
    "model": model.state_dict(),
    "optimizer": opt.state_dict(),
    "epoch": 3,
    "half": torch.ones(5, dtype=torch.float16),
    "mask": torch.tensor([True, False, True]),
    "ids": torch.arange(7, dtype=torch.int64),
}
p = lambda name: os.path.join(out, name)  # noqa: E731

torch.save(state, p("legacy.pt"), _use_new_zipfile_serialization=False)
torch.save(state, p("legacy_p4.pt"), _use_new_zipfile_serialization=False, pickle_protocol=4)
torch.save(state, p("zip.pt"))

flat = {"w": torch.randn(32, 16), "b": torch.arange(5, dtype=torch.int64),
        "h": torch.ones(3, dtype=torch.float16), "step": 7}
dcp.save_state_dict(flat, dcp.FileSystemWriter(p("dist")), no_dist=True)
dcp.save_state_dict(flat, dcp.FileSystemWriter(p("dist1"), single_file_per_rank=True), no_dist=True)

arr = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
np.save(p("arr.npy"), arr)
np.savez(p("arrays.npz"), a=arr, b=np.array(["x", "yz"]))
np.savez_compressed(p("arrays_z.npz"), a=arr)
with open(p("two.npy"), "wb") as f:
    np.save(f, arr)
    np.save(f, np.arange(9, dtype=np.int16))

plain = {"weights": arr, "step": 100, "names": ["a", "b"], "lr": 0.1, "blob": bytes(range(256)) * 8}
for proto in (2, 3, 4, 5):
    with open(p("p%d.pkl" % proto), "wb") as f:
        pickle.dump(plain, f, protocol=proto)
with open(p("multi.pkl"), "wb") as f:
    pickle.dump(plain, f)
    pickle.dump({"epoch": 4}, f, protocol=2)
    pickle.dump([1, 2, 3], f)

with open(p("trainer_state.json"), "w") as f:
    json.dump({"log_history": [{"grad_norm": float("nan"), "loss": float("inf"), "min": float("-inf"),
                                "step": 10, "lr": 1e-05}], "global_step": 10}, f, indent=2)
with open(p("metrics.json"), "w") as f:
    for step in range(5):
        f.write(json.dumps({"step": step, "loss": 1.0 / (step + 1), "note": "é \"q\""}) + "\n")
with open(p("config.json"), "w", encoding="utf-8-sig") as f:
    json.dump({"hidden_size": 16, "architectures": ["Net"]}, f)
open(p("extra.json"), "w").close()

# What each file loads to with its own framework: the tests check that the
# files are real ones.
torch.load(p("legacy.pt"))
torch.load(p("legacy_p4.pt"))
torch.load(p("zip.pt"))
back = {"w": torch.zeros(32, 16), "b": torch.zeros(5, dtype=torch.int64), "h": torch.zeros(3, dtype=torch.float16), "step": 0}
dcp.load_state_dict(back, dcp.FileSystemReader(p("dist1")), no_dist=True)
assert torch.equal(back["w"], flat["w"]) and back["step"] == 7
with open(p("multi.pkl"), "rb") as f:
    assert [pickle.load(f)["step"], pickle.load(f), pickle.load(f)] == [100, {"epoch": 4}, [1, 2, 3]]
with open(p("two.npy"), "rb") as f:
    np.load(f), np.load(f)
json.load(open(p("trainer_state.json")))
json.load(open(p("config.json"), encoding="utf-8-sig"))
