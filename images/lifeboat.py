"""Helpers for trainers that run under lifeboat (standard library only).

Lifeboat needs no change in a trainer: it notices the checkpoints a trainer
saves into its checkpoint directory and forwards the stop signals. This
module makes the few things a trainer may want to do explicitly easy and
correct:

    import lifeboat

    ckpt = lifeboat.checkpoint_dir()          # LIFEBOAT_DIR, else "ckpt"
    start = lifeboat.resume_dir()             # None on a fresh start
    while step < total and not lifeboat.stop_requested():
        ...
        if step % 100 == 0:
            path = os.path.join(ckpt, "step-%06d" % step)
            paddle.save(model.state_dict(), os.path.join(path, "model.pdparams"))
            lifeboat.commit(path, step)       # marker written last, atomically

commit() writes the marker file lifeboat looks for (LIFEBOAT_MARKER,
".lifeboat-commit" by default) into a checkpoint directory after the
checkpoint's files are on disk, so lifeboat uploads it at once instead of
waiting for the files to settle, and never uploads a half-written one.

stop_requested() becomes true when lifeboat delivers a stop: SIGTERM (what
Kubernetes sends, forwarded by lifeboat) or SIGUSR1 (what `lifeboat run
--rewrite TERM:USR1` delivers). The handler only records the request and
then calls the handler that was there before it, so a trainer's own handler
keeps working; it never exits the process itself. In a job of several ranks
it also becomes true on every rank once any rank's lifeboat began a stop
(lifeboat writes LIFEBOAT_STOP_FILE, $LIFEBOAT_DIR/.lifeboat-stop.json).

stop_step(step) makes every rank save the same step when the job stops:

    if lifeboat.stop_requested():
        last = lifeboat.stop_step(step)       # the same on every rank
        while step < last:
            step += 1
            train_one_step()                  # its collectives complete
        save_and_commit(step)                 # step-NNN/, or commit(path, step)
        sys.exit(0)

It tells lifeboat the step this rank has finished and waits until the
ranks' lifeboats have agreed, through the store, on the step to save: the
highest step asked when every rank asked, or one more than that when some
rank did not ask in time (it is blocked in the next step's collective,
waiting for the ranks that stopped to join it). Without a job-wide stop
(one rank, or lifeboat's --coord-interval 0) it returns step at once.

Resume information comes from LIFEBOAT_RESUME_DIR/STEP/ID, which `lifeboat
run` sets, else from DIR/.lifeboat-resume.json, which `lifeboat restore`
(an init container) writes.
"""

import json
import os
import signal
import tempfile
import threading
import time

__all__ = [
    "DEFAULT_DIR",
    "DEFAULT_MARKER",
    "RESUME_FILE",
    "STOP_FILE",
    "STOP_REQUEST_FILE",
    "STOP_SIGNALS",
    "checkpoint_dir",
    "commit",
    "install_stop_handler",
    "marker_name",
    "resume_dir",
    "resume_id",
    "resume_step",
    "stop_requested",
    "stop_step",
]

DEFAULT_DIR = "ckpt"
DEFAULT_MARKER = ".lifeboat-commit"
RESUME_FILE = ".lifeboat-resume.json"
# Lifeboat writes STOP_FILE when a job-wide stop begins (its path is
# LIFEBOAT_STOP_FILE), with the agreed step once known; stop_step writes
# STOP_REQUEST_FILE beside it.
STOP_FILE = ".lifeboat-stop.json"
STOP_REQUEST_FILE = ".lifeboat-stop-request.json"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

# Lifeboat's scanner skips every name with this prefix (other than the
# marker), so temporary files never look like part of a checkpoint.
_INTERNAL_PREFIX = ".lifeboat-"

_stop = threading.Event()
_installed = {}  # signal number -> the handler ours replaced
_install_lock = threading.Lock()


def checkpoint_dir(default=DEFAULT_DIR):
    """Returns the directory to save checkpoints into: LIFEBOAT_DIR, which
    lifeboat exports to the trainer, else default."""
    return os.environ.get("LIFEBOAT_DIR") or default


def marker_name():
    """Returns the marker file name: LIFEBOAT_MARKER, else ".lifeboat-commit"."""
    return os.environ.get("LIFEBOAT_MARKER") or DEFAULT_MARKER


def _resume(directory):
    """Returns (dir, step, id) of the restored checkpoint, or None.

    A non-empty LIFEBOAT_RESUME_DIR wins (lifeboat run restored). Otherwise
    the resume file in the checkpoint directory is read (lifeboat restore in
    an init container wrote it); lifeboat removes it when it finds nothing to
    restore, and a file whose directory is gone is ignored.
    """
    d = os.environ.get("LIFEBOAT_RESUME_DIR")
    if d:
        step = os.environ.get("LIFEBOAT_RESUME_STEP")
        return d, int(step) if step else None, os.environ.get("LIFEBOAT_RESUME_ID") or None
    path = os.path.join(directory or checkpoint_dir(), RESUME_FILE)
    try:
        with open(path, "rb") as f:
            info = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise RuntimeError("lifeboat: read resume file %s: %s" % (path, e)) from e
    if not isinstance(info, dict) or not isinstance(info.get("dir"), str) or not info["dir"]:
        raise RuntimeError("lifeboat: resume file %s has no \"dir\": %r" % (path, info))
    d = info["dir"]
    if not os.path.isdir(d):
        return None
    step = info.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        step = None
    return d, step, info.get("id") or None


def resume_dir(directory=None):
    """Returns the directory holding the restored checkpoint, or None when
    the trainer starts fresh. directory is the checkpoint directory whose
    resume file is read when the environment says nothing (default:
    checkpoint_dir())."""
    r = _resume(directory)
    return r[0] if r else None


def resume_step(directory=None):
    """Returns the step of the restored checkpoint as an int, or None."""
    r = _resume(directory)
    return r[1] if r else None


def resume_id(directory=None):
    """Returns the store's id of the restored checkpoint, or None."""
    r = _resume(directory)
    return r[2] if r else None


def _on_stop(signum, frame):
    _stop.set()
    prev = _installed.get(signum)
    if callable(prev):
        prev(signum, frame)


def install_stop_handler(signals=STOP_SIGNALS):
    """Installs the stop handler for signals (SIGTERM and SIGUSR1 by
    default). It records the request, then calls the handler installed
    before it, if that was a Python function; SIG_DFL and SIG_IGN are not
    acted on, so the process is not terminated by them. Installing twice is
    harmless. Must be called from the main thread (a Python rule)."""
    with _install_lock:
        for s in signals:
            if s in _installed and signal.getsignal(s) is _on_stop:
                continue
            try:
                prev = signal.signal(s, _on_stop)
            except ValueError as e:
                raise RuntimeError(
                    "lifeboat: install a handler for %s: %s; call lifeboat.install_stop_handler() "
                    "from the main thread before starting threads" % (signal.Signals(s).name, e)
                ) from e
            _installed[s] = prev


def stop_requested():
    """Reports whether a stop signal has arrived or, in a job of several
    ranks, whether any rank's lifeboat began a stop (the stop file exists).
    Once true it stays true. The first call installs the stop handler (see
    install_stop_handler), so call it once early in the main thread, or
    call install_stop_handler() yourself."""
    if not _installed:
        install_stop_handler()
    if _stop.is_set():
        return True
    path = os.environ.get("LIFEBOAT_STOP_FILE")
    if path and os.path.exists(path):
        _stop.set()
        return True
    return False


def _agreed_step(path):
    """Returns the step in the stop file at path, or None."""
    try:
        with open(path, "rb") as f:
            info = json.load(f)
    except (OSError, ValueError):  # none yet; lifeboat replaces it atomically
        return None
    step = info.get("step") if isinstance(info, dict) else None
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    return step


def stop_step(current_step, timeout=None):
    """Returns the step every rank saves before it exits, once a stop has
    begun (stop_requested() is true): the same on every rank. current_step
    is the step this rank has finished. Train until the returned step is
    finished (it may be current_step itself, or one more), save it, and
    exit.

    It writes current_step to a request file beside the stop file and
    polls the stop file until lifeboat has written the agreed step there:
    as soon as every rank has asked, else a quarter of --grace after the
    stop began on this rank, else (the store does not answer) half of
    --grace after it. timeout, in seconds, bounds the wait; TimeoutError when it
    passes. Without a job-wide stop (LIFEBOAT_STOP_FILE unset: one rank, or
    not under lifeboat run) it returns current_step at once."""
    if isinstance(current_step, bool) or not isinstance(current_step, int) or current_step < 0:
        raise ValueError("lifeboat: stop_step: the step must be a non-negative int, not %r" % (current_step,))
    path = os.environ.get("LIFEBOAT_STOP_FILE")
    if not path:
        return current_step
    step = _agreed_step(path)
    if step is not None:
        return step
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=_INTERNAL_PREFIX + "tmp-coord-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"step": current_step}, f)
        os.replace(tmp, os.path.join(directory, STOP_REQUEST_FILE))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = _agreed_step(path)
        if step is not None:
            return step
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(
                "lifeboat: stop_step(%d): no step agreed in %s within %ss; save step %d, which the other ranks may not "
                "have saved" % (current_step, path, timeout, current_step)
            )
        time.sleep(0.02)


def _fsync_path(path, flags=os.O_RDONLY):
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(path, step):
    """Marks the checkpoint in directory path as complete at step.

    Every regular file under path is fsynced, then every directory under it,
    then the marker is written atomically: a temporary file in path holding
    the step is written and fsynced, renamed to the marker name, and path is
    fsynced so the rename itself is durable. Lifeboat therefore never sees a
    marker before the checkpoint's files are complete, nor a marker without
    its step. Returns the marker's path.

    To save into the same directory again, remove its marker before writing
    the new files, or lifeboat may take the half-written files for the old
    complete checkpoint.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError("lifeboat: commit %s: step must be a non-negative int, not %r" % (path, step))
    marker = marker_name()
    if not os.path.isdir(path):
        raise NotADirectoryError("lifeboat: commit %s: not a directory; save the checkpoint into it first" % path)
    dirs = []
    for root, subdirs, files in os.walk(path):
        subdirs[:] = [d for d in subdirs if not d.startswith(_INTERNAL_PREFIX)]
        dirs.append(root)
        for name in files:
            if name == marker or name.startswith(_INTERNAL_PREFIX):
                continue
            p = os.path.join(root, name)
            if os.path.isfile(p) and not os.path.islink(p):
                _fsync_path(p)
    for d in reversed(dirs):  # deepest first, path itself last
        _fsync_path(d)
    fd, tmp = tempfile.mkstemp(prefix=_INTERNAL_PREFIX + "tmp-", dir=path)
    try:
        with os.fdopen(fd, "w") as f:
            f.write("%d\n" % step)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        final = os.path.join(path, marker)
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_path(path)
    return final
