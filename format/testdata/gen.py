#!/usr/bin/python3
"""Writes the fixtures of format's tests into this directory.

Run from anywhere: python3 gen.py. The output is deterministic for a given
Python and numpy; the files are committed, so the tests need neither.

  state_p{0,1,2,3,4,5}.pdparams  a dict shaped like a Paddle state_dict
                                 (OrderedDict of numpy arrays and scalars),
                                 one file per pickle protocol
  mixed_p{0,2,4}.pkl             many opcode kinds: memo references, sets,
                                 big ints (LONG1, LONG4), bytearray, byte
                                 strings holding 0x2e ('.'), persistent ids,
                                 copyreg extension codes (EXT1, EXT2, EXT4)
  oob_p5.pkl                     protocol 5 with out-of-band buffers
                                 (NEXT_BUFFER, READONLY_BUFFER)
  handmade_p4.pkl                STRING, BINSTRING, SHORT_BINSTRING, DUP, POP,
                                 INST, OBJ, BINUNICODE8 and BINBYTES8, which
                                 CPython 3 does not write for small objects
  large_p4.pdopt                 a 70 KB payload of '.' bytes, which the
                                 pickler writes outside any frame
  torch_like.pt                  a zip laid out like torch.save's archive
  legacy_small.pt                not written here: torch 1.13's
                                 torch.save(OrderedDict(w=arange(6.).reshape(2, 3),
                                 b=tensor([1, 2]), h=ones(3, dtype=float16)),
                                 _use_new_zipfile_serialization=False)
  arrays.npz, arrays_z.npz       numpy.savez and numpy.savez_compressed
"""

import collections
import copyreg
import io
import os
import pickle
import sys
import types
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def out(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


class Module:
    """A stand-in for a user class, pickled by reference."""

    def __init__(self, n):
        self.n = n


Module.__module__ = "trainer"
_trainer = types.ModuleType("trainer")
_trainer.Module = Module
sys.modules["trainer"] = _trainer


class PersistentPickler(pickle.Pickler):
    """Writes every Storage by persistent id, as torch.save does."""

    def persistent_id(self, obj):
        if not isinstance(obj, Storage):
            return None
        if self.proto == 0:  # PERSID: an ASCII line
            return "storage:%s:cpu:%d" % (obj.key, obj.numel)
        return ("storage", obj.key, "cpu", obj.numel)  # BINPERSID


class Storage:
    def __init__(self, key, numel):
        self.key = key
        self.numel = numel


def dumps_persistent(obj, protocol):
    buf = io.BytesIO()
    p = PersistentPickler(buf, protocol=protocol)
    p.proto = protocol
    p.dump(obj)
    return buf.getvalue()


def state_dict(rng):
    sd = collections.OrderedDict()
    sd["linear.weight"] = rng.standard_normal((4, 3)).astype(np.float32)
    sd["linear.bias"] = np.array([0.1, 46.0, -2.5], dtype=np.float32)
    sd["embedding.weight"] = rng.integers(0, 256, (5, 2)).astype(np.uint8)
    # Every byte 0x2e: a STOP opcode's value inside a payload.
    sd["norm.scale"] = np.full(6, 0x2E, dtype=np.uint8)
    sd["StructuredToParameterName@@"] = {
        "linear.weight": "linear_0.w_0",
        "linear.bias": "linear_0.b_0",
    }
    sd["step"] = 1200
    sd["lr"] = 3.0e-4
    return sd


class KwNew:
    """Pickled with NEWOBJ_EX at protocol 4."""

    def __new__(cls, n, *, scale=1):
        self = object.__new__(cls)
        self.n, self.scale = n, scale
        return self

    def __getnewargs_ex__(self):
        return (self.n,), {"scale": self.scale}


KwNew.__module__ = "trainer"
_trainer.KwNew = KwNew


def handmade():
    """Opcodes CPython 3 no longer writes (or writes only for objects over
    4 GiB), put together by hand; pickle.loads checks that they are a pickle."""
    b8 = lambda n: n.to_bytes(8, "little")
    b4 = lambda n: n.to_bytes(4, "little")
    data = b"".join([
        b"\x80\x04(",
        b"S'abc.'\n",                                 # STRING
        b"T" + b4(3) + b"d.e",                         # BINSTRING
        b"U" + bytes([2]) + b"..",                     # SHORT_BINSTRING
        b"\x8d" + b8(3) + "\u00e9.".encode(),       # BINUNICODE8
        b"\x8e" + b8(2) + b"\n.",                    # BINBYTES8
        b"2",                                          # DUP
        b"0",                                          # POP
        b"(icollections\nOrderedDict\n",            # INST
        b"(ccollections\nOrderedDict\no",           # OBJ
        b"(N1",                                        # POP_MARK
        b"l",                                          # LIST
        b".",
    ])
    pickle.loads(data)
    return data


def mixed(rng):
    shared = ["shared", 1, 2.5]
    recursive = ([],)
    recursive[0].append(recursive)  # POP / POP_MARK
    many = ["s%d" % i for i in range(300)]
    return {
        "none": None,
        "bools": (True, False),
        "ints": [0, 1, 255, 256, 65535, 65536, -1, 2**31 - 1, -(2**31), 2**40],
        "long1": 2**100,
        "long4": -(2**3000),
        "float": 1.5e-300,
        "str": "unicode \u00e9\u4e2d line\nbreak",
        "bytes": b"a.b.\x2e.\n.",
        "bytearray": bytearray(b"..x.."),
        "set": {1, 2, 3},
        "frozenset": frozenset({"a"}),
        "nested": [[[]], {}, ()],
        "memo": [shared, shared],
        "tuple1": ("one",),
        "tuple2": ("one", "two"),
        "tuple3": ("one", "two", "three"),
        "tuple4": ("one", "two", "three", "four"),
        "module": Module(3),
        "od": collections.OrderedDict(a=1),
        "storage": Storage("0", 12),
        "array": rng.standard_normal(3),
        "kwnew": KwNew(2),
        "recursive": recursive,
        # More than 256 memo entries: LONG_BINPUT and LONG_BINGET.
        "memo300": many + [many[299]],
    }


def torch_like(rng):
    """A zip shaped like torch.save's: data.pkl with persistent ids,
    one stored file per storage, byteorder and version."""
    data = collections.OrderedDict(
        [("fc.weight", Storage("0", 6)), ("fc.bias", Storage("1", 2))]
    )
    files = [
        ("archive/data.pkl", dumps_persistent(data, 2)),
        ("archive/byteorder", b"little"),
        ("archive/data/0", rng.standard_normal(6).astype(np.float32).tobytes()),
        ("archive/data/1", np.full(2, 0x2E2E2E2E, dtype=np.uint32).tobytes()),
        ("archive/version", b"3\n"),
        ("archive/.data/serialization_id", b"0123456789"),
    ]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
        for name, content in files:
            # A ZipInfo of its own: writestr would stamp the current time.
            z.writestr(zipfile.ZipInfo(name), content)
    return buf.getvalue()


def main():
    # Extension codes, so that EXT1, EXT2 and EXT4 appear (protocol >= 2).
    copyreg.add_extension("collections", "OrderedDict", 7)
    copyreg.add_extension("trainer", "Module", 300)
    copyreg.add_extension("builtins", "set", 70000)

    for proto in range(6):
        rng = np.random.default_rng(proto)
        out("state_p%d.pdparams" % proto, pickle.dumps(state_dict(rng), protocol=proto))

    for proto in (0, 2, 4):
        rng = np.random.default_rng(10 + proto)
        out("mixed_p%d.pkl" % proto, dumps_persistent(mixed(rng), proto))

    rng = np.random.default_rng(20)
    arrays = [rng.standard_normal(4).astype(np.float32), np.full(3, 0x2E, np.uint8)]
    arrays[1].setflags(write=False)  # READONLY_BUFFER
    bufs = []
    data = pickle.dumps(
        {"a": arrays[0], "b": pickle.PickleBuffer(arrays[1]), "c": bytearray(b".")},
        protocol=5,
        buffer_callback=bufs.append,
    )
    assert bufs, "no out-of-band buffers"
    out("oob_p5.pkl", data)

    out("handmade_p4.pkl", handmade())

    out("large_p4.pdopt", pickle.dumps({"moment1": b"." * 70000, "step": 3}, protocol=4))

    rng = np.random.default_rng(30)
    out("torch_like.pt", torch_like(rng))
    a = rng.standard_normal((3, 2)).astype(np.float32)
    b = np.full(7, 0x2E, np.uint8)
    for name, save in (("arrays.npz", np.savez), ("arrays_z.npz", np.savez_compressed)):
        buf = io.BytesIO()
        save(buf, a=a, b=b)
        out(name, buf.getvalue())


if __name__ == "__main__":
    main()
