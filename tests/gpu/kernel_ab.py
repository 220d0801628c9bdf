#!/usr/bin/env python3
"""kernel_ab.py NAME=FILE.md... : one table of kernel_bench's rows for several kernel trees.

Each argument names a tree and one kernel_bench --out file of a run of it (a name given several
times is several rounds of that tree, e.g. from tests/gpu/kernel_ab.sh). For every shape of the
first tree's files: each tree's graph-replay times (us, every round), their median, the per-call
time in a graph of N (median), and each later tree's median over the first's. Writes markdown to
stdout. Exit status 2 on a file without a kernel_bench table, or trees with no shape in common.
"""
import statistics
import sys


def read_rows(path):
    """{shape: (graph_us, xn_us)} of one kernel_bench markdown file (its main tables)."""
    rows, header = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("|"):
                header = None
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells and cells[0] == "shape":
                header = cells
                continue
            if header is None or set(line.strip()) <= set("|-: "):
                continue
            if "graph us" not in header or "graph xN us/call" not in header or len(cells) != len(header):
                continue
            try:
                rows[cells[0]] = (float(cells[header.index("graph us")]),
                                  float(cells[header.index("graph xN us/call")]))
            except ValueError:
                continue
    return rows


def main(argv):
    if len(argv) < 2 or any("=" not in a for a in argv[1:]):
        sys.stderr.write(__doc__)
        return 2
    trees = {}  # name -> list of {shape: (graph, xn)} per round, in the order given
    for arg in argv[1:]:
        name, path = arg.split("=", 1)
        rows = read_rows(path)
        if not rows:
            sys.stderr.write(f"kernel_ab: {path} has no kernel_bench table (graph us, graph xN us/call)\n")
            return 2
        trees.setdefault(name, []).append(rows)
    names = list(trees)
    first = names[0]
    shapes = [s for s in trees[first][0] if all(any(s in r for r in trees[n]) for n in names)]
    if not shapes:
        sys.stderr.write("kernel_ab: the trees have no shape in common\n")
        return 2

    def values(name, shape, k):
        return [r[shape][k] for r in trees[name] if shape in r]

    head = ["shape"] + [f"{n} graph us" for n in names] + [f"{n} xN" for n in names]
    head += [f"{n} / {first}" for n in names[1:]]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for s in shapes:
        graph = {n: values(n, s, 0) for n in names}
        xn = {n: statistics.median(values(n, s, 1)) for n in names}
        cells = [s] + [" / ".join(f"{v:.1f}" for v in graph[n]) for n in names]
        cells += [f"{xn[n]:.1f}" for n in names]
        base = statistics.median(graph[first])
        cells += [f"{statistics.median(graph[n]) / base:.3f}" for n in names[1:]]
        print("| " + " | ".join(cells) + " |")
    print(f"\nMedians of graph-replay times over the rounds; xN: median per-call time in a graph of N calls. "
          f"Rounds: " + ", ".join(f"{n} {len(trees[n])}" for n in names) + ".")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
