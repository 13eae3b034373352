"""Tests of lifeboat.py on real files, real signals and real processes.

Run with scripts/python-test.sh (python3 -m unittest discover -s images).
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
from unittest import mock

import lifeboat

HERE = os.path.dirname(os.path.abspath(__file__))
ENV_KEYS = ("LIFEBOAT_DIR", "LIFEBOAT_MARKER", "LIFEBOAT_RESUME_DIR", "LIFEBOAT_RESUME_STEP", "LIFEBOAT_RESUME_ID", "LIFEBOAT_STOP_FILE")


class EnvTestCase(unittest.TestCase):
    """Clears lifeboat's variables for each test and gives it a temp dir."""

    def setUp(self):
        saved = {k: os.environ.pop(k) for k in ENV_KEYS if k in os.environ}
        self.addCleanup(self._restore_env, saved)
        self.tmp = tempfile.mkdtemp(prefix="lifeboat-py-test-")
        self.addCleanup(subprocess.run, ["rm", "-rf", self.tmp], check=False)

    @staticmethod
    def _restore_env(saved):
        for k in ENV_KEYS:
            os.environ.pop(k, None)
        os.environ.update(saved)


def write_file(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


class CheckpointDirTest(EnvTestCase):
    def test_from_env(self):
        os.environ["LIFEBOAT_DIR"] = self.tmp
        self.assertEqual(lifeboat.checkpoint_dir(), self.tmp)

    def test_default_when_unset_or_empty(self):
        self.assertEqual(lifeboat.checkpoint_dir(), lifeboat.DEFAULT_DIR)
        self.assertEqual(lifeboat.checkpoint_dir("/elsewhere"), "/elsewhere")
        os.environ["LIFEBOAT_DIR"] = ""
        self.assertEqual(lifeboat.checkpoint_dir(), lifeboat.DEFAULT_DIR)

    def test_marker_name(self):
        self.assertEqual(lifeboat.marker_name(), ".lifeboat-commit")
        os.environ["LIFEBOAT_MARKER"] = "COMMITTED"
        self.assertEqual(lifeboat.marker_name(), "COMMITTED")


class ResumeTest(EnvTestCase):
    def write_resume_file(self, info):
        os.environ["LIFEBOAT_DIR"] = self.tmp
        with open(os.path.join(self.tmp, lifeboat.RESUME_FILE), "w") as f:
            f.write(info if isinstance(info, str) else json.dumps(info))

    def test_fresh_start(self):
        os.environ["LIFEBOAT_DIR"] = self.tmp
        self.assertIsNone(lifeboat.resume_dir())
        self.assertIsNone(lifeboat.resume_step())
        self.assertIsNone(lifeboat.resume_id())

    def test_env_from_lifeboat_run(self):
        d = os.path.join(self.tmp, "step-000300")
        os.makedirs(d)
        os.environ.update(LIFEBOAT_DIR=self.tmp, LIFEBOAT_RESUME_DIR=d, LIFEBOAT_RESUME_STEP="300", LIFEBOAT_RESUME_ID="abc")
        # The environment wins over a resume file.
        self.write_resume_file({"dir": self.tmp, "step": 7, "id": "old"})
        self.assertEqual(lifeboat.resume_dir(), d)
        self.assertEqual(lifeboat.resume_step(), 300)
        self.assertEqual(lifeboat.resume_id(), "abc")

    def test_file_from_lifeboat_restore(self):
        d = os.path.join(self.tmp, "step-000500")
        os.makedirs(d)
        # lifeboat run without a store does not set the variables; with
        # one and --restore never it sets them empty. Both read the file.
        for env in ({}, {"LIFEBOAT_RESUME_DIR": "", "LIFEBOAT_RESUME_STEP": "", "LIFEBOAT_RESUME_ID": ""}):
            with self.subTest(env=env):
                os.environ.update(env)
                self.write_resume_file({"dir": d, "step": 500, "id": "f00"})
                self.assertEqual(lifeboat.resume_dir(), d)
                self.assertEqual(lifeboat.resume_step(), 500)
                self.assertEqual(lifeboat.resume_id(), "f00")

    def test_file_in_a_directory_given_as_argument(self):
        # The sidecar Job empties LIFEBOAT_DIR and passes the directory.
        os.environ["LIFEBOAT_DIR"] = ""
        d = os.path.join(self.tmp, "step-000009")
        os.makedirs(d)
        with open(os.path.join(self.tmp, lifeboat.RESUME_FILE), "w") as f:
            json.dump({"dir": d, "step": 9, "id": "i"}, f)
        self.assertIsNone(lifeboat.resume_dir(), "the default directory has no resume file")
        self.assertEqual(lifeboat.resume_dir(self.tmp), d)
        self.assertEqual(lifeboat.resume_step(self.tmp), 9)
        self.assertEqual(lifeboat.resume_id(self.tmp), "i")

    def test_file_whose_dir_is_gone(self):
        self.write_resume_file({"dir": os.path.join(self.tmp, "gone"), "step": 5, "id": "x"})
        self.assertIsNone(lifeboat.resume_dir())
        self.assertIsNone(lifeboat.resume_step())

    def test_bad_file(self):
        for content in ("{not json", "[]", '{"step": 3}', '{"dir": ""}'):
            with self.subTest(content=content):
                self.write_resume_file(content)
                with self.assertRaisesRegex(RuntimeError, "resume file"):
                    lifeboat.resume_dir()


class StopSignalTest(unittest.TestCase):
    """Real signals sent to this process, with the real handler."""

    def setUp(self):
        saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
        self.addCleanup(self._restore, saved)
        self._reset()

    def _restore(self, saved):
        for s, h in saved.items():
            signal.signal(s, h)
        self._reset()

    @staticmethod
    def _reset():
        lifeboat._stop.clear()
        lifeboat._installed.clear()

    def send_and_wait(self, sig):
        os.kill(os.getpid(), sig)
        # CPython runs the handler in the main thread at the next bytecode
        # boundary; give it a moment anyway.
        deadline = time.monotonic() + 5
        while not lifeboat._stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.001)

    def test_sigterm_sets_the_flag_and_does_not_exit(self):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # what the trainer starts with
        self.assertFalse(lifeboat.stop_requested())  # installs the handler
        self.send_and_wait(signal.SIGTERM)
        self.assertTrue(lifeboat.stop_requested())
        self.assertTrue(lifeboat.stop_requested(), "the request stays set")

    def test_sigusr1_from_rewrite(self):
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        lifeboat.install_stop_handler()
        self.send_and_wait(signal.SIGUSR1)
        self.assertTrue(lifeboat.stop_requested())

    def test_chains_to_the_previous_handler(self):
        calls = []
        signal.signal(signal.SIGTERM, lambda s, f: calls.append(s))
        lifeboat.install_stop_handler()
        lifeboat.install_stop_handler()  # twice: must not chain to itself
        self.send_and_wait(signal.SIGTERM)
        self.assertTrue(lifeboat.stop_requested())
        self.assertEqual(calls, [signal.SIGTERM], "the trainer's own handler runs exactly once")

    def test_ignored_signal_stays_harmless(self):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        lifeboat.install_stop_handler([signal.SIGTERM])
        self.send_and_wait(signal.SIGTERM)
        self.assertTrue(lifeboat.stop_requested())

    def test_install_from_a_thread_says_what_to_do(self):
        errs = []

        def run():
            try:
                lifeboat.install_stop_handler()
            except RuntimeError as e:
                errs.append(str(e))

        t = threading.Thread(target=run)
        t.start()
        t.join()
        self.assertEqual(len(errs), 1)
        self.assertIn("main thread", errs[0])

    def test_trainer_process_stops_cleanly_on_sigterm(self):
        child = textwrap.dedent(
            """
            import sys, time, lifeboat
            lifeboat.stop_requested()
            print("ready", flush=True)
            steps = 0
            while not lifeboat.stop_requested():
                steps += 1
                time.sleep(0.001)
            print("stopped after", steps, "steps", flush=True)
            """
        )
        env = dict(os.environ, PYTHONPATH=HERE)
        p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, env=env)
        try:
            self.assertEqual(p.stdout.readline().strip(), "ready")
            p.send_signal(signal.SIGTERM)
            out, _ = p.communicate(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 0, "the trainer decides when to exit, not the handler")
        self.assertIn("stopped after", out)


class JobWideStopTest(EnvTestCase):
    """The stop file and step request lifeboat's job-wide stop uses, with a
    thread playing lifeboat."""

    def setUp(self):
        super().setUp()
        saved = {s: signal.getsignal(s) for s in lifeboat.STOP_SIGNALS}
        self.addCleanup(self._restore, saved)
        lifeboat._stop.clear()
        lifeboat._installed.clear()
        self.stop_file = os.path.join(self.tmp, lifeboat.STOP_FILE)
        self.request_file = os.path.join(self.tmp, lifeboat.STOP_REQUEST_FILE)
        os.environ.update(LIFEBOAT_DIR=self.tmp, LIFEBOAT_STOP_FILE=self.stop_file)

    @staticmethod
    def _restore(saved):
        for s, h in saved.items():
            signal.signal(s, h)
        lifeboat._stop.clear()
        lifeboat._installed.clear()

    def write_stop_file(self, **info):
        info.setdefault("id", "20250301T120000.000000000Z-rank-000001")
        info.setdefault("from_rank", 1)
        info.setdefault("reason", "SIGTERM")
        tmp = self.stop_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(info, f)
        os.replace(tmp, self.stop_file)

    def test_stop_file_makes_stop_requested_true(self):
        self.assertFalse(lifeboat.stop_requested())
        self.write_stop_file()
        self.assertTrue(lifeboat.stop_requested(), "another rank's stop is this rank's stop")
        os.remove(self.stop_file)
        self.assertTrue(lifeboat.stop_requested(), "the request stays set")

    def test_without_a_job_wide_stop_the_step_is_the_current_one(self):
        del os.environ["LIFEBOAT_STOP_FILE"]
        self.assertEqual(lifeboat.stop_step(7), 7)
        self.assertFalse(os.path.exists(self.request_file))

    def test_asks_lifeboat_and_waits_for_the_agreed_step(self):
        self.write_stop_file()
        seen = []

        def lifeboat_side():
            deadline = time.monotonic() + 10
            while not os.path.exists(self.request_file) and time.monotonic() < deadline:
                time.sleep(0.005)
            with open(self.request_file) as f:
                seen.append(json.load(f))
            time.sleep(0.05)  # the ranks agree through the store
            self.write_stop_file(step=13)

        t = threading.Thread(target=lifeboat_side)
        t.start()
        try:
            self.assertEqual(lifeboat.stop_step(12, timeout=10), 13)
        finally:
            t.join()
        self.assertEqual(seen, [{"step": 12}])
        left = [n for n in os.listdir(self.tmp) if n.startswith(".lifeboat-tmp")]
        self.assertEqual(left, [], "no temporary file is left behind")

    def test_a_step_already_agreed_is_returned_at_once(self):
        self.write_stop_file(step=9)
        self.assertEqual(lifeboat.stop_step(9), 9)
        self.assertEqual(lifeboat.stop_step(8), 9, "the same step on every rank, even one behind")
        self.assertFalse(os.path.exists(self.request_file), "nothing to ask")

    def test_timeout_says_what_to_do(self):
        self.write_stop_file()
        t0 = time.monotonic()
        with self.assertRaisesRegex(TimeoutError, "no step agreed"):
            lifeboat.stop_step(4, timeout=0.1)
        self.assertLess(time.monotonic() - t0, 5)
        with open(self.request_file) as f:
            self.assertEqual(json.load(f), {"step": 4})

    def test_a_stop_file_without_a_valid_step_is_waited_on(self):
        self.write_stop_file(step="13")
        with self.assertRaises(TimeoutError):
            lifeboat.stop_step(4, timeout=0.05)
        self.write_stop_file(step=True)
        with self.assertRaises(TimeoutError):
            lifeboat.stop_step(4, timeout=0.05)

    def test_bad_steps(self):
        for bad in (-1, True, "3", 2.0, None):
            with self.assertRaises(ValueError, msg=repr(bad)):
                lifeboat.stop_step(bad)


class CommitTest(EnvTestCase):
    def make_checkpoint(self, name, files):
        d = os.path.join(self.tmp, name)
        for rel, data in files.items():
            write_file(os.path.join(d, rel), data)
        return d

    def test_marker_holds_the_step(self):
        d = self.make_checkpoint("step-000100", {"model.pdparams": b"w" * 1000, "opt/model.pdopt": b"o" * 10})
        got = lifeboat.commit(d, 100)
        self.assertEqual(got, os.path.join(d, ".lifeboat-commit"))
        with open(got) as f:
            self.assertEqual(f.read().strip(), "100")
        self.assertEqual(sorted(os.listdir(d)), [".lifeboat-commit", "model.pdparams", "opt"], "no temp file left")

    def test_marker_name_from_env_and_recommit(self):
        os.environ["LIFEBOAT_MARKER"] = "DONE"
        d = self.make_checkpoint("latest", {"model.pdparams": b"1"})
        lifeboat.commit(d, 1)
        lifeboat.commit(d, 2)
        with open(os.path.join(d, "DONE")) as f:
            self.assertEqual(f.read(), "2\n")

    def test_bad_arguments(self):
        d = self.make_checkpoint("c", {"a": b"a"})
        for step in (-1, "5", 1.5, True, None):
            with self.subTest(step=step), self.assertRaisesRegex(ValueError, "step must be"):
                lifeboat.commit(d, step)
        with self.assertRaisesRegex(NotADirectoryError, "not a directory"):
            lifeboat.commit(os.path.join(self.tmp, "missing"), 1)
        self.assertFalse(os.path.exists(os.path.join(d, ".lifeboat-commit")))

    def test_files_are_synced_before_the_marker_appears(self):
        d = self.make_checkpoint("step-000007", {"model.pdparams": b"m" * 4096, "sub/model.pdopt": b"o" * 10})
        events = []
        real_fsync, real_replace = os.fsync, os.replace

        def fsync(fd):
            events.append(("fsync", os.readlink("/proc/self/fd/%d" % fd)))
            return real_fsync(fd)

        def replace(src, dst):
            events.append(("rename", os.path.basename(src), dst))
            with open(src) as f:
                events.append(("temp content", f.read()))
            return real_replace(src, dst)

        with mock.patch.object(os, "fsync", fsync), mock.patch.object(os, "replace", replace):
            lifeboat.commit(d, 7)
        marker = os.path.join(d, ".lifeboat-commit")
        kinds = [e[0] for e in events]
        at = kinds.index("rename")
        synced_before = {e[1] for e in events[:at] if e[0] == "fsync"}
        for p in (os.path.join(d, "model.pdparams"), os.path.join(d, "sub", "model.pdopt"), os.path.join(d, "sub"), d):
            self.assertIn(p, synced_before, "%s must be fsynced before the marker is renamed into place" % p)
        temp = events[at][1]
        self.assertTrue(temp.startswith(".lifeboat-"), "temp name %r must carry lifeboat's internal prefix (skipped by its scanner)" % temp)
        self.assertIn(os.path.join(d, temp), synced_before, "the temp marker must be fsynced before the rename")
        self.assertEqual(events[at][2], marker)
        self.assertEqual(events[at + 1], ("temp content", "7\n"), "the marker is complete when it appears")
        self.assertEqual(events[-1], ("fsync", d), "the directory is fsynced after the rename")

    def test_no_marker_is_ever_seen_before_the_files_are_complete(self):
        # A writer saves checkpoints of 1 MiB in many small writes and
        # commits each; an observer scans meanwhile, the way lifeboat does.
        # Whenever it sees a marker, the files must be whole and the step
        # right.
        n, size = 20, 1 << 20
        blob = os.urandom(size)
        digest = hashlib.sha256(blob).hexdigest()
        stop = threading.Event()
        seen, problems = set(), []

        def observe():
            while True:
                last = stop.is_set()  # the writer is done: one more full pass
                for name in os.listdir(self.tmp):
                    d = os.path.join(self.tmp, name)
                    try:
                        with open(os.path.join(d, ".lifeboat-commit")) as f:
                            content = f.read()
                    except FileNotFoundError:
                        continue
                    step = int(name.split("-")[1])
                    if content != "%d\n" % step:
                        problems.append("%s: marker content %r" % (name, content))
                    for rel in ("model.pdparams", "model.pdopt"):
                        with open(os.path.join(d, rel), "rb") as f:
                            if hashlib.sha256(f.read()).hexdigest() != digest:
                                problems.append("%s/%s incomplete when the marker was visible" % (name, rel))
                    seen.add(name)
                if last:
                    return

        t = threading.Thread(target=observe)
        t.start()
        try:
            for step in range(1, n + 1):
                d = os.path.join(self.tmp, "step-%06d" % step)
                os.makedirs(d)
                for rel in ("model.pdparams", "model.pdopt"):
                    with open(os.path.join(d, rel), "wb") as f:
                        for off in range(0, size, 64 << 10):
                            f.write(blob[off : off + (64 << 10)])
                lifeboat.commit(d, step)
        finally:
            stop.set()
            t.join(timeout=60)
        self.assertEqual(problems, [])
        self.assertEqual(len(seen), n)

    def crash_during_commit(self, where):
        """Runs commit in a child that SIGKILLs itself at where; returns the
        checkpoint directory it left."""
        d = self.make_checkpoint("step-000042", {"model.pdparams": b"p" * 100000})
        child = textwrap.dedent(
            """
            import os, signal, sys, lifeboat
            where = sys.argv[2]
            real_fsync, real_replace = os.fsync, os.replace
            def die(*a):
                os.kill(os.getpid(), signal.SIGKILL)
            def fsync(fd):
                name = os.path.basename(os.readlink("/proc/self/fd/%d" % fd))
                if where == "data" and name == "model.pdparams":
                    die()
                if where == "temp" and name.startswith(".lifeboat-tmp-"):
                    die()
                return real_fsync(fd)
            os.fsync = fsync
            if where == "rename":
                os.replace = lambda s, d: die()
            lifeboat.commit(sys.argv[1], 42)
            """
        )
        env = dict(os.environ, PYTHONPATH=HERE)
        p = subprocess.run([sys.executable, "-c", child, d, where], env=env, timeout=30)
        self.assertEqual(p.returncode, -signal.SIGKILL, "the child must die inside commit at %s" % where)
        return d

    def test_crash_leaves_no_marker(self):
        for where in ("data", "temp", "rename"):
            with self.subTest(crash_at=where):
                d = self.crash_during_commit(where)
                self.assertFalse(os.path.exists(os.path.join(d, ".lifeboat-commit")), "a crash at %s left a marker" % where)
                for name in os.listdir(d):
                    self.assertTrue(name == "model.pdparams" or name.startswith(".lifeboat-"), "unexpected leftover %s" % name)
                subprocess.run(["rm", "-rf", d], check=True)


if __name__ == "__main__":
    unittest.main()
