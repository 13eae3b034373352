"""Tests of the example trainer images/example/train.py: on its own, with
real SIGTERMs, and unmodified under the real lifeboat binary (LIFEBOAT_BIN,
which scripts/python-test.sh builds) with a directory store: preempted, then
resumed in a fresh "pod" by `lifeboat run` and by `lifeboat restore`.
"""

import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "example", "train.py")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIFEBOAT_") and not k.startswith("TRAIN_")}
    env["PYTHONPATH"] = HERE
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class Proc:
    """A started process whose stdout lines are collected by a thread, so
    a test can wait for a line and then signal it."""

    def __init__(self, argv, env):
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines, self.err = [], []
        self.cond = threading.Condition()
        self.t_out = threading.Thread(target=self._read, args=(self.p.stdout, self.lines), daemon=True)
        self.t_err = threading.Thread(target=self._read, args=(self.p.stderr, self.err), daemon=True)
        self.t_out.start()
        self.t_err.start()

    def _read(self, f, into):
        for line in f:
            with self.cond:
                into.append(line.rstrip("\n"))
                self.cond.notify_all()

    def wait_for(self, needle, timeout=30):
        with self.cond:
            ok = self.cond.wait_for(lambda: any(needle in l for l in self.lines) or self.p.poll() is not None, timeout)
            if not ok or not any(needle in l for l in self.lines):
                raise AssertionError("no line with %r in the output; stdout:\n%s\nstderr:\n%s" % (needle, "\n".join(self.lines), "\n".join(self.err)))

    def finish(self, timeout=60):
        try:
            code = self.p.wait(timeout)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
        self.t_out.join(5)
        self.t_err.join(5)
        self.p.stdout.close()
        self.p.stderr.close()
        return code

    def output(self):
        return "stdout:\n%s\nstderr:\n%s" % ("\n".join(self.lines), "\n".join(self.err))


def train_argv(*args):
    return [sys.executable, TRAIN, "--step-time", "0.002", "--pad-mb", "0.1"] + list(args)


class ExampleTrainerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lifeboat-example-test-")
        self.addCleanup(subprocess.run, ["rm", "-rf", self.tmp], check=False)

    def test_saves_step_directories(self):
        ckpt = os.path.join(self.tmp, "ckpt")
        p = subprocess.run(train_argv("--steps", "300", "--save-every", "100"), env=clean_env(LIFEBOAT_DIR=ckpt),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(os.listdir(ckpt)), ["step-000100", "step-000200", "step-000300"])
        with open(os.path.join(ckpt, "step-000300", "model.pdparams"), "rb") as f:
            self.assertEqual(pickle.load(f)["step"], 300)
        self.assertIn("done at step 300", p.stdout)

    def test_sigterm_saves_backup_and_exits_0(self):
        ckpt = os.path.join(self.tmp, "ckpt")
        p = Proc(train_argv("--steps", "1000000", "--save-every", "50"), clean_env(LIFEBOAT_DIR=ckpt))
        p.wait_for("saved step-000100")
        p.p.send_signal(signal.SIGTERM)
        self.assertEqual(p.finish(), 0, p.output())
        with open(os.path.join(ckpt, "backup", "latest.pdparams"), "rb") as f:
            step = pickle.load(f)["step"]
        self.assertGreaterEqual(step, 100)
        self.assertIn("SIGTERM at step %d" % step, "\n".join(p.lines))

        # A new start with LIFEBOAT_RESUME_DIR resumes from the backup.
        r = subprocess.run(train_argv("--steps", str(step + 10)),
                           env=clean_env(LIFEBOAT_DIR=os.path.join(self.tmp, "ckpt2"), LIFEBOAT_RESUME_DIR=os.path.join(ckpt, "backup")),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("resumed from %s at step %d" % (os.path.join(ckpt, "backup"), step), r.stdout)
        self.assertIn("done at step %d" % (step + 10), r.stdout)

    def test_helper_commits_and_stops(self):
        ckpt = os.path.join(self.tmp, "ckpt")
        p = Proc(train_argv("--steps", "1000000", "--save-every", "50", "--use-helper"), clean_env(LIFEBOAT_DIR=ckpt))
        p.wait_for("saved step-000100")
        p.p.send_signal(signal.SIGTERM)
        self.assertEqual(p.finish(), 0, p.output())
        dirs = sorted(os.listdir(ckpt))
        self.assertNotIn("backup", dirs, "with the helper the trainer saves a step directory when asked to stop")
        for d in dirs:
            with open(os.path.join(ckpt, d, ".lifeboat-commit")) as f:
                self.assertEqual(int(f.read()), int(d.split("-")[1]), "marker of %s" % d)
        self.assertIn("stop requested at step %d" % int(dirs[-1].split("-")[1]), "\n".join(p.lines))

    def test_resume_from_init_container_file(self):
        ckpt = os.path.join(self.tmp, "ckpt")
        subprocess.run(train_argv("--steps", "200", "--save-every", "100"), env=clean_env(LIFEBOAT_DIR=ckpt), check=True,
                       capture_output=True, timeout=60)
        with open(os.path.join(ckpt, ".lifeboat-resume.json"), "w") as f:
            json.dump({"dir": os.path.join(ckpt, "step-000100"), "step": 100, "id": "x"}, f)
        # As in job-init-restore.yaml (LIFEBOAT_DIR) and job-sidecar.yaml
        # (LIFEBOAT_DIR emptied, --dir given).
        for env, extra in (({"LIFEBOAT_DIR": ckpt}, []), ({"LIFEBOAT_DIR": ckpt}, ["--use-helper"]),
                           ({"LIFEBOAT_DIR": ""}, ["--use-helper", "--dir", ckpt]), ({"LIFEBOAT_DIR": ""}, ["--dir", ckpt])):
            with self.subTest(env=env, args=extra):
                r = subprocess.run(train_argv("--steps", "150", *extra), env=clean_env(**env),
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("resumed from %s at step 100" % os.path.join(ckpt, "step-000100"), r.stdout)


@unittest.skipUnless(os.environ.get("LIFEBOAT_BIN") or os.environ.get("LIFEBOAT_TEST_DISALLOW_SKIP") == "1",
                     "LIFEBOAT_BIN is not set (scripts/python-test.sh builds lifeboat and sets it)")
class UnderLifeboatTest(unittest.TestCase):
    """The example trainer, unmodified, under the real lifeboat binary."""

    def setUp(self):
        self.bin = os.environ.get("LIFEBOAT_BIN", "")
        self.assertTrue(self.bin and os.access(self.bin, os.X_OK), "LIFEBOAT_BIN=%r is not an executable lifeboat" % self.bin)
        self.tmp = tempfile.mkdtemp(prefix="lifeboat-example-e2e-")
        self.addCleanup(subprocess.run, ["rm", "-rf", self.tmp], check=False)
        self.store = "file://" + os.path.join(self.tmp, "store")

    def run_flags(self, pod):
        return [self.bin, "run", "--store", self.store, "--dir", os.path.join(self.tmp, pod), "--grace", "20s",
                "--settle", "300ms", "--scan-interval", "100ms", "--log-format", "json", "--"]

    def preempt(self, *train_args):
        """Runs pod1 until its second checkpoint, SIGTERMs lifeboat and
        returns the step the trainer reached."""
        p = Proc(self.run_flags("pod1") + train_argv("--steps", "1000000", "--save-every", "50", *train_args), clean_env())
        p.wait_for("saved step-000100")
        p.p.send_signal(signal.SIGTERM)
        code = p.finish()
        self.assertEqual(code, 143, "lifeboat must exit 143 when the preempted trainer exits 0\n" + p.output())
        out = "\n".join(p.lines)
        for line in p.lines:
            if "SIGTERM at step" in line or "stop requested at step" in line:
                return int(line.split("at step ")[1].split(":")[0])
        self.fail("the trainer did not report its stop\n" + out)

    def test_preempt_then_resume_in_a_new_pod(self):
        for helper in ([], ["--use-helper"]):
            with self.subTest(args=helper):
                subprocess.run(["rm", "-rf", self.tmp + "/store", self.tmp + "/pod1", self.tmp + "/pod2"], check=True)
                step = self.preempt(*helper)
                r = subprocess.run(self.run_flags("pod2") + train_argv("--steps", str(step + 20), *helper), env=clean_env(),
                                   capture_output=True, text=True, timeout=120)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn("at step %d" % step, r.stdout, "pod2 must resume where pod1 was preempted\n" + r.stdout)
                self.assertIn("resumed from %s" % os.path.join(self.tmp, "pod2"), r.stdout)
                self.assertIn("done at step %d" % (step + 20), r.stdout)

    def test_restore_init_container_then_plain_trainer(self):
        step = self.preempt()
        pod2 = os.path.join(self.tmp, "pod2")
        r = subprocess.run([self.bin, "restore", "--store", self.store, "--dir", pod2], env=clean_env(),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(os.path.join(pod2, ".lifeboat-resume.json")), "lifeboat restore writes the resume file")
        r = subprocess.run(train_argv("--steps", str(step + 5)), env=clean_env(LIFEBOAT_DIR=pod2),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("at step %d" % step, r.stdout)


if __name__ == "__main__":
    unittest.main()
