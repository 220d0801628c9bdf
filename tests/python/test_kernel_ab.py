"""tests/gpu/kernel_ab.py and kernel_ab.sh on this machine: a stand-in kernel_bench writes tables
whose times depend on the kernel tree it is given, so the merged table, the rounds' order and the
errors can be checked without a GPU. Plain python3."""
import os
import pathlib
import stat
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
AB_PY = ROOT / "tests" / "gpu" / "kernel_ab.py"
AB_SH = ROOT / "tests" / "gpu" / "kernel_ab.sh"

HEADER = ("| shape | B | H | D | P | splits | MB | GFLOP | floor us | eager us | graph us | graph xN us/call "
          "| graph/floor |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")


def table(rows):
    """kernel_bench's main table for {shape: (graph_us, xn_us)}, with the compiled-kernels table after it."""
    body = "".join(f"| {s} | 1 | 8 | 16 | 1024 | 32 | 1.5 | 0.29 | 0.5 | {g + 0.3} | {g} | {x} | 9.9 |\n"
                   for s, (g, x) in rows.items())
    return ("Device: stand-in\n\n" + HEADER + body + "\nCompiled kernels:\n\n| spec | arch | kernel | regs |\n"
            "|---|---|---|---|\n| h8 | sm_90 | k | 200 |\n")


class KernelAbPy(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.d = pathlib.Path(self.dir.name)

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, rows):
        p = self.d / name
        p.write_text(table(rows))
        return str(p)

    def run_py(self, *args):
        return subprocess.run([sys.executable, str(AB_PY), *args], capture_output=True, text=True)

    def test_medians_ratios_and_rounds(self):
        a1 = self.write("a1.md", {"K2 H8": (100.0, 98.0), "P1k H8": (10.0, 8.0)})
        a2 = self.write("a2.md", {"K2 H8": (102.0, 99.0), "P1k H8": (10.4, 8.2)})
        b1 = self.write("b1.md", {"K2 H8": (90.0, 88.0), "P1k H8": (11.0, 9.0), "only in b": (1.0, 1.0)})
        r = self.run_py(f"main={a1}", f"main={a2}", f"exp={b1}")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [l for l in r.stdout.splitlines() if l.startswith("| ")]
        self.assertIn("exp / main", lines[0])
        k2 = next(l for l in lines if l.startswith("| K2 H8 "))
        cells = [c.strip() for c in k2.strip("|").split("|")]
        self.assertEqual(cells[1], "100.0 / 102.0")
        self.assertEqual(cells[2], "90.0")
        self.assertEqual(cells[3], "98.5")  # median of the xN column over main's two rounds
        self.assertEqual(cells[5], f"{90.0 / 101.0:.3f}")
        p1k = next(l for l in lines if l.startswith("| P1k H8 "))
        self.assertTrue(p1k.rstrip().endswith(f"| {11.0 / 10.2:.3f} |"))
        self.assertFalse(any("only in b" in l for l in lines))  # shapes of the first tree only
        self.assertIn("Rounds: main 2, exp 1", r.stdout)

    def test_a_file_without_a_table_is_an_error(self):
        a = self.write("a.md", {"K2 H8": (1.0, 1.0)})
        empty = self.d / "empty.md"
        empty.write_text("kernel_bench failed before its table\n")
        r = self.run_py(f"a={a}", f"b={empty}")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no kernel_bench table", r.stderr)

    def test_no_shape_in_common_is_an_error(self):
        r = self.run_py(f"a={self.write('a.md', {'K2': (1.0, 1.0)})}", f"b={self.write('b.md', {'K5': (1.0, 1.0)})}")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no shape in common", r.stderr)

    def test_usage(self):
        self.assertEqual(self.run_py().returncode, 2)
        self.assertEqual(self.run_py("no-equals-sign").returncode, 2)


class KernelAbSh(unittest.TestCase):
    """The runner with a stand-in kernel_bench: rounds alternate the trees, each run sees its tree."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        d = pathlib.Path(self.dir.name)
        self.d = d
        (d / "pack" / "bin").mkdir(parents=True)
        fake = d / "pack" / "bin" / "kernel_bench"
        # Times: 100 us for tree "slow", 80 for any other, 70 with --pdl on; the order of calls goes
        # to calls.log, each run's arguments to args.log.
        fake.write_text(f"""#!/bin/bash
echo "$*" >> {d}/args.log
out=""; pdl=""; while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; [ "$1" = --pdl ] && pdl=$2; shift; done
tree=$(basename "$(dirname "$KJIT_KERNEL_DIR")")
echo "$tree" >> {d}/calls.log
g=80; [ "$tree" = slow ] && g=100; [ "$pdl" = on ] && g=70
{sys.executable} -c 'import sys; sys.path.insert(0, "{pathlib.Path(__file__).parent}"); import test_kernel_ab as t; open(sys.argv[1], "w").write(t.table({{"K2 H8": (float(sys.argv[2]), 1.0)}}))' "$out" "$g"
""")
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
        for name in ("slow", "fast"):
            (d / name / "kernel_sources" / "mla_verify").mkdir(parents=True)
            (d / name / "kernel_sources" / "mla_verify" / "mla_verify.cu").write_text("// stand-in\n")

    def tearDown(self):
        self.dir.cleanup()

    def run_sh(self, *args):
        env = dict(os.environ, KJIT_DEVPACK=str(self.d / "pack"))
        return subprocess.run(["bash", str(AB_SH), *args], capture_output=True, text=True, env=env)

    def test_rounds_alternate_and_the_table_compares(self):
        out = self.d / "out"
        r = self.run_sh(str(out), "2", f"slow={self.d / 'slow' / 'kernel_sources'}",
                        f"fast={self.d / 'fast' / 'kernel_sources'}", "--", "--proxy", "sm_120", "--only", "K2 |K5 ")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual((self.d / "calls.log").read_text().split(), ["slow", "fast", "slow", "fast"])
        ab = (out / "ab.md").read_text()
        self.assertIn("| K2 H8 | 100.0 / 100.0 | 80.0 / 80.0 |", ab)
        self.assertIn("| 0.800 |", ab)
        self.assertTrue((out / "fast_2.md").exists())

    def test_a_tree_against_itself_with_its_own_arguments(self):
        out = self.d / "out"
        tree = self.d / "fast" / "kernel_sources"
        r = self.run_sh(str(out), "1", f"off={tree},--pdl,off", f"on={tree},--pdl,on", "--", "--only", "K2 |K5 ")
        self.assertEqual(r.returncode, 0, r.stderr)
        args = (self.d / "args.log").read_text().splitlines()
        self.assertEqual(len(args), 2)
        # The shared arguments, then the tree's own, then --out.
        self.assertTrue(args[0].startswith("--only K2 |K5  --pdl off --out "), args[0])
        self.assertTrue(args[1].startswith("--only K2 |K5  --pdl on --out "), args[1])
        ab = (out / "ab.md").read_text()
        self.assertIn("| K2 H8 | 80.0 | 70.0 |", ab)
        self.assertIn("| 0.875 |", ab)
        r = self.run_sh(str(self.d / "o3"), "1", f"a={self.d},--pdl,on", f"b={tree}", "--")
        self.assertEqual(r.returncode, 2)
        self.assertIn("not a kernel_sources tree", r.stderr)

    def test_one_tree_or_a_wrong_directory_is_an_error(self):
        r = self.run_sh(str(self.d / "o1"), "1", f"slow={self.d / 'slow' / 'kernel_sources'}", "--", "--reps", "1")
        self.assertEqual(r.returncode, 2)
        r = self.run_sh(str(self.d / "o2"), "1", f"slow={self.d / 'slow' / 'kernel_sources'}", f"x={self.d}", "--")
        self.assertEqual(r.returncode, 2)
        self.assertIn("not a kernel_sources tree", r.stderr)


if __name__ == "__main__":
    unittest.main()
