#!/usr/bin/env python3
"""The deployment artifacts as CI can check them without a GPU, a container runtime or a cluster:
the .deb that CPack builds (its files, control fields, unit, library SONAME, pkg-config file), the
systemd unit under `systemd-analyze verify`, the Kubernetes DaemonSet, and the cache pre-fill
command of the container build file run against a temporary cache.

usage: test_package.py --build DIR --source DIR --kjit PATH
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

ARGS = None


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


class Deb(unittest.TestCase):
    """cpack builds the package once; every test reads it."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kjit-deb-")
        try:
            cls.build_deb()
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def build_deb(cls):
        r = run(["cpack", "-G", "DEB", "-B", cls.tmp, "--config", os.path.join(ARGS.build, "CPackConfig.cmake")],
                cwd=ARGS.build)
        if r.returncode != 0:
            raise RuntimeError("cpack failed:\n" + r.stdout + r.stderr)
        debs = [f for f in os.listdir(cls.tmp) if f.endswith(".deb")]
        if len(debs) != 1:
            raise RuntimeError(f"cpack made {debs} in {cls.tmp}")
        cls.deb = os.path.join(cls.tmp, debs[0])
        cls.root = os.path.join(cls.tmp, "root")
        subprocess.run(["dpkg-deb", "-x", cls.deb, cls.root], check=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def field(self, name):
        r = run(["dpkg-deb", "-f", self.deb, name])
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.strip()

    def test_control_fields(self):
        info = run(["dpkg-deb", "-I", self.deb]).stdout
        self.assertEqual(self.field("Package"), "kjit")
        self.assertEqual(self.field("Architecture"), run(["dpkg", "--print-architecture"]).stdout.strip())
        depends = self.field("Depends")
        # dpkg-shlibdeps found the Debian libraries kjitd links (gRPC, protobuf, prometheus-cpp).
        for lib in ("libgrpc++", "libprotobuf", "libprometheus-cpp-pull", "libc6", "python3"):
            self.assertIn(lib, depends)
        for script in ("postinst", "prerm", "postrm"):
            self.assertRegex(info, rf"\b{script}\b")

    def test_files(self):
        listing = run(["dpkg-deb", "-c", self.deb]).stdout
        paths = {line.split()[5].lstrip(".") for line in listing.splitlines() if len(line.split()) >= 6}
        for p in ("/usr/bin/kjitd", "/usr/bin/kjit", "/usr/lib/libkjit_client.so.1",
                  "/usr/include/kjit/kjit_client.h", "/usr/include/kjit/kjit_client.hpp",
                  "/usr/lib/pkgconfig/kjit_client.pc", "/usr/lib/python3/dist-packages/kjit/__init__.py",
                  "/usr/lib/python3/dist-packages/kjit/sglang/__init__.py",
                  "/usr/lib/systemd/system/kjitd.service", "/usr/lib/sysusers.d/kjit.conf",
                  "/usr/share/kjit/README.md", "/usr/share/kjit/kjit_protos.desc",
                  "/usr/share/kjit/deploy/kubernetes/kjitd-daemonset.yaml",
                  "/usr/share/kjit/deploy/container/Dockerfile"):
            self.assertIn(p, paths)
        self.assertFalse([p for p in paths if "__pycache__" in p or p.endswith(".pyc")])
        self.assertFalse([p for p in paths if p.startswith("/usr/local")])

    def test_library_is_versioned(self):
        lib = os.path.join(self.root, "usr/lib")
        real = os.path.realpath(os.path.join(lib, "libkjit_client.so.1"))
        self.assertRegex(os.path.basename(real), r"^libkjit_client\.so\.1\.\d+\.\d+$")
        dyn = run(["readelf", "-d", real]).stdout
        self.assertIn("Library soname: [libkjit_client.so.1]", dyn)
        self.assertEqual(os.readlink(os.path.join(lib, "libkjit_client.so")), "libkjit_client.so.1")

    def test_pkg_config(self):
        pc = os.path.join(self.root, "usr/lib/pkgconfig")
        env = dict(os.environ, PKG_CONFIG_PATH=pc, PKG_CONFIG_LIBDIR=pc)
        self.assertEqual(run(["pkg-config", "--libs-only-l", "kjit_client"], env=env).stdout.split(), ["-lkjit_client"])
        self.assertEqual(run(["pkg-config", "--variable=libdir", "kjit_client"], env=env).stdout.strip(), "/usr/lib")
        self.assertEqual(run(["pkg-config", "--modversion", "kjit_client"], env=env).stdout.strip(), self.field("Version"))
        self.assertEqual(run(["pkg-config", "--cflags", "kjit_client"], env=env).stdout.split(),
                         ["-I/usr/include/kjit"])

    def test_installed_binaries_run(self):
        for tool, needle in (("kjitd", "--metrics-listen"), ("kjit", "status")):
            r = run([os.path.join(self.root, "usr/bin", tool), "--help"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(needle, r.stdout)

    def unit_text(self):
        with open(os.path.join(self.root, "usr/lib/systemd/system/kjitd.service")) as f:
            return f.read()

    def verify(self, text):
        """systemd-analyze verify on a copy whose ExecStart names the extracted kjitd (the path
        must exist); returns everything it printed."""
        d = tempfile.mkdtemp(dir=self.tmp)
        unit = os.path.join(d, "kjitd.service")
        with open(unit, "w") as f:
            f.write(text.replace("ExecStart=/usr/bin/kjitd", "ExecStart=" + os.path.join(self.root, "usr/bin/kjitd")))
        r = run(["systemd-analyze", "verify", unit])
        return r.returncode, (r.stdout + r.stderr).strip()

    def test_unit_verifies(self):
        text = self.unit_text()
        self.assertIn("ExecStart=/usr/bin/kjitd --socket /run/kjit/kjitd.sock --cache-dir /var/cache/kjit\n", text)
        code, out = self.verify(text)
        self.assertEqual((code, out), (0, ""))
        # The check sees mistakes: an unknown key, a directive in the wrong section, a bad value.
        self.assertIn("Unknown key", self.verify(text.replace("Restart=on-failure", "Restart=on-failure\nRestartt=no"))[1])
        self.assertIn("Unknown key", self.verify(text.replace("[Service]", "[Service]\nWantedBy=multi-user.target"))[1])
        self.assertIn("restart specifier", self.verify(text.replace("Restart=on-failure", "Restart=sometimes"))[1])

    def test_unit_settings(self):
        settings = {}
        for line in self.unit_text().splitlines():
            if "=" in line and not line.startswith("#"):
                key, value = line.split("=", 1)
                settings.setdefault(key, value)
        expect = {"User": "kjit", "Group": "kjit", "RuntimeDirectory": "kjit", "RuntimeDirectoryMode": "0750",
                  "CacheDirectory": "kjit", "Restart": "on-failure", "NoNewPrivileges": "yes",
                  "ProtectSystem": "strict"}
        for key, value in expect.items():
            self.assertEqual(settings.get(key), value, key)
        # CUDA needs /dev/nvidia*; clients share POSIX shared memory and CUDA IPC with kjitd.
        for key in ("PrivateDevices", "PrivateIPC", "PrivateUsers", "MemoryDenyWriteExecute", "IPCNamespacePath"):
            self.assertNotIn(key, settings)
        with open(os.path.join(self.root, "usr/lib/sysusers.d/kjit.conf")) as f:
            self.assertRegex(f.read(), r"(?m)^u kjit ")


class Manifest(unittest.TestCase):
    def load(self):
        import yaml
        with open(os.path.join(ARGS.source, "deploy/kubernetes/kjitd-daemonset.yaml")) as f:
            return list(yaml.safe_load_all(f))

    def test_daemonset(self):
        docs = self.load()
        self.assertEqual(len(docs), 1)
        ds = docs[0]
        self.assertEqual((ds["apiVersion"], ds["kind"]), ("apps/v1", "DaemonSet"))
        self.assertEqual(ds["spec"]["selector"]["matchLabels"], ds["spec"]["template"]["metadata"]["labels"])
        pod = ds["spec"]["template"]["spec"]
        self.assertIs(pod["hostIPC"], True)
        volumes = {v["name"]: v for v in pod["volumes"]}
        [kjitd] = [c for c in pod["containers"] if c["name"] == "kjitd"]
        mounts = {m["name"]: m["mountPath"] for m in kjitd["volumeMounts"]}
        args = kjitd["args"]
        socket = args[args.index("--socket") + 1]
        cache = args[args.index("--cache-dir") + 1]
        # The socket's directory and the cache are hostPath volumes mounted where the flags point.
        self.assertEqual(volumes["socket-dir"]["hostPath"]["path"], os.path.dirname(socket))
        self.assertEqual(mounts["socket-dir"], os.path.dirname(socket))
        self.assertIn("hostPath", volumes["cache"])
        self.assertEqual(mounts["cache"], cache)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            cmd = kjitd[probe]["exec"]["command"]
            self.assertEqual(cmd[:3], ["kjit", "status", "--health"], probe)
            self.assertEqual(cmd[cmd.index("--target") + 1], "unix://" + socket, probe)
        metrics = args[args.index("--metrics-listen") + 1]
        self.assertEqual(int(metrics.rsplit(":", 1)[1]), kjitd["ports"][0]["containerPort"])
        # No TCP gRPC port: nothing but metrics on the pod network.
        self.assertNotIn("--listen", args)

    def test_probe_command_is_a_real_kjit_command(self):
        kjitd = self.load()[0]["spec"]["template"]["spec"]["containers"][0]
        cmd = kjitd["livenessProbe"]["exec"]["command"]
        # Against no daemon it fails (exit 1), within its deadline, and says why.
        r = run([ARGS.kjit, *cmd[1:-1], "unix:///nonexistent/kjitd.sock"], timeout=30)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("cannot reach kjitd", r.stderr)


class Prefill(unittest.TestCase):
    def test_dockerfile_prefill_command_fills_the_cache(self):
        with open(os.path.join(ARGS.source, "deploy/container/Dockerfile")) as f:
            text = f.read().replace("\\\n", " ")
        [line] = [l for l in text.splitlines() if l.startswith("RUN ") and "kjit compile" in l]
        steps = [s.strip() for s in line[len("RUN "):].split("&&")]
        kjit_steps = [shlex.split(s) for s in steps if s.startswith("kjit ")]
        self.assertEqual([s[:2] for s in kjit_steps], [["kjit", "compile"], ["kjit", "cache"]])
        compile_args = kjit_steps[0]
        self.assertEqual(compile_args[compile_args.index("--arch") + 1], "sm_120,sm_90")
        image_cache = compile_args[compile_args.index("--cache-dir") + 1]
        with tempfile.TemporaryDirectory(prefix="kjit-prefill-") as cache:
            for step in kjit_steps:
                argv = [ARGS.kjit] + [cache if a == image_cache else a for a in step[1:]]
                r = run(argv, timeout=1200)
                self.assertEqual(r.returncode, 0, " ".join(argv) + "\n" + r.stdout + r.stderr)
            ls = json.loads(run([ARGS.kjit, "cache", "ls", "--json", "--cache-dir", cache]).stdout)
            archs = {e["arch"] for e in ls["entries"]}
            self.assertIn("sm_120", archs)
            self.assertTrue({"sm_90", "sm_90a"} & archs, archs)
            # Every specialization of the catalog for both archs: a second compile is all hits.
            again = run([ARGS.kjit, "compile", "--arch", "sm_120,sm_90", "--cache-dir", cache, "--json"])
            self.assertEqual(again.returncode, 0, again.stderr)
            self.assertNotIn('"origin": "compiled"', again.stdout)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--kjit", required=True)
    ARGS, rest = p.parse_known_args()
    ARGS.build, ARGS.source, ARGS.kjit = (os.path.abspath(x) for x in (ARGS.build, ARGS.source, ARGS.kjit))
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
