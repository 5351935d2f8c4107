#!/usr/bin/env python3
"""Checks which way the library's imports point (make test runs it).

The monitor has layers, and an import may only go down or stay in its own part:

    values     monitor::record, monitor::clock   (plain values; import nothing above)
    incidents  monitor::incidents
    devices    monitor::devices
    door       the rest of monitor (api, decode, gathering, pipeline, feedback, output, …)

and the crate has the same rule one level up: the monitor imports neither the daemon
nor the console, and the model imports neither. Two more rules keep directions
visible: no `pub use` re-exports a module under another path (an alias that re-routes
imports), and a `pub use` inside the monitor re-exports only what lies in its own
module's subtree (a type is named where it is defined). And the monitor's child
modules (api, pipeline, devices, …) import one another without a circle. Test modules
are not checked.

    python3 scripts/import_directions.py [SRC]      exit 1 and one line a breach
    python3 scripts/import_directions.py --self-test   plants breaches in a copy; all found?
"""
import re
import sys
from pathlib import Path

# (module path prefix, layer name, rank); the longest prefix names a module's part.
PARTS = [
    ("model", "model", 0),
    ("monitor::record", "values", 1),
    ("monitor::clock", "values", 1),
    ("monitor::incidents", "incidents", 2),
    ("monitor::devices", "devices", 3),
    ("monitor", "door", 4),
    ("daemon", "daemon", 5),
    ("console", "console", 5),
]
RANKED = {"model", "monitor"}  # only these top-level modules' imports are checked

MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")
PATH_ATTR = re.compile(r'^\s*#\[path\s*=\s*"([^"]+)"\]')
QUALIFIED = re.compile(r"\b((?:crate|super|self)(?:::\w+)+)")


def strip_comment(line):
    """The line without its // comment (a // inside a string is kept)."""
    in_str = False
    i = 0
    while i < len(line) - 1:
        c = line[i]
        if c == "\\" and in_str:
            i += 2
            continue
        if c == '"':
            in_str = not in_str
        elif not in_str and line[i : i + 2] == "//":
            return line[:i]
        i += 1
    return line


def block_end(lines, start):
    """The index of the line that closes the block opened on line `start` (braces in
    strings and char literals are not counted)."""
    depth = 0
    for i in range(start, len(lines)):
        line = re.sub(r"'(\\.|[^\\'])'", "''", lines[i])
        line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
        depth += line.count("{") - line.count("}")
        if depth <= 0:
            return i
    return len(lines) - 1


def code_lines(text):
    """The lines that are not test code: inline `#[cfg(test)] mod … { … }` blocks are
    blanked out."""
    lines = [strip_comment(line) for line in text.split("\n")]
    i = 0
    while i < len(lines):
        if re.match(r"^\s*mod\s+\w+\s*\{", lines[i]) and i > 0 and "cfg(test)" in lines[i - 1]:
            end = block_end(lines, i)
            lines[i : end + 1] = [""] * (end + 1 - i)
            i = end
        i += 1
    return lines


def walk_modules(src):
    """Module path (tuple) -> file, from src/lib.rs down, test modules left out."""
    modules = {}

    def visit(path, file, dir_for_children):
        modules[path] = file
        lines = file.read_text().split("\n")
        for i, line in enumerate(lines):
            m = MOD_DECL.match(line)
            if not m:
                continue
            above = lines[max(0, i - 2) : i]
            if any("cfg(test)" in a for a in above):
                continue
            name = m.group(1)
            attr = next((PATH_ATTR.match(a) for a in above if PATH_ATTR.match(a)), None)
            if attr:
                child = file.parent / attr.group(1)
                visit(path + (name,), child, None)
                continue
            base = dir_for_children
            if base is None:
                base = file.parent / file.stem
            for cand in (base / f"{name}.rs", base / name / "mod.rs"):
                if cand.exists():
                    sub = cand.parent if cand.name == "mod.rs" else cand.parent / cand.stem
                    visit(path + (name,), cand, sub)
                    break

    visit((), src / "lib.rs", src)
    return modules


def expand_use(tree):
    """`a::{b, c::{d, e as f}}` -> [a::b, a::c::d, a::c::e] (self keeps its parent)."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))
    if "{" not in tree:
        return [tree]
    head, rest = tree.split("{", 1)
    body = rest[: rest.rfind("}")]
    parts, depth, cur = [], 0, ""
    for c in body:
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += c == "{"
        depth -= c == "}"
        cur += c
    if cur:
        parts.append(cur)
    out = []
    for p in parts:
        for leaf in expand_use(p):
            out.append(head.rstrip(":") if leaf == "self" else head + leaf)
    return out


def resolve(here, path, modules):
    """The module a path names (the longest known module prefix), or None for one
    outside the crate."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    elif here + (segs[0],) in modules:
        base = here
    else:
        return None
    named = base + tuple(segs)
    full = named
    while full and full not in modules:
        full = full[:-1]
    # A lowercase name that is no module, with more of the path after it, is a module
    # imported under another path: the path goes through an alias.
    rest = named[len(full) :]
    through_alias = len(rest) > 1 and rest[0][:1].islower()
    return full, named, through_alias


def part_of(module):
    name = "::".join(module)
    best = None
    for prefix, part, rank in PARTS:
        if name == prefix or name.startswith(prefix + "::"):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, part, rank)
    return best


def uses_of(lines):
    """(is pub, tree) for each use statement, and every qualified path in the code."""
    text = re.sub(r"pub\(in [^)]*\)", "pub", "\n".join(lines))
    uses = []
    for m in re.finditer(r"(?m)^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
        uses.append((m.group(1) is not None, m.group(2)))
    rest = re.sub(r"(?m)^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", "", text)
    return uses, QUALIFIED.findall(rest)


def circles(edges):
    """Each circle in the graph once, as the path that closes it."""
    found, done = [], set()

    def visit(node, path):
        if node in path:
            cycle = path[path.index(node) :] + [node]
            if frozenset(cycle) not in done:
                done.add(frozenset(cycle))
                found.append(cycle)
            return
        for nxt in sorted(edges.get(node, ())):
            visit(nxt, path + [node])

    for start in sorted(edges):
        visit(start, [])
    return found


# What --self-test plants in a copy of the tree, and the breach each must be found as:
# the check is only worth running if it can fail.
PLANTED = [
    ("monitor/incidents/footprint.rs", "use crate::monitor::output::Alert;", "incidents imports door above it"),
    ("monitor/devices/windows.rs", "pub use crate::monitor::record::Source;", "re-exports what monitor::record defines"),
    ("monitor/mod.rs", "pub use incidents::footprint;", "re-exports the module monitor::incidents::footprint"),
    ("model/mod.rs", "use crate::daemon::Daemon;", "model imports daemon above it"),
    ("monitor/settings.rs", "use crate::monitor::api::Monitor;", "api -> settings -> api"),
]


def self_test(src):
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "src"
        shutil.copytree(src, copy)
        if breaches_in(copy):
            print("self-test: the tree breaks the layers before anything is planted")
            return 1
        for rel, line, _ in PLANTED:
            f = copy / rel
            f.write_text(f"{line}\n{f.read_text()}")
        found = "\n".join(breaches_in(copy))
        missed = [(rel, want) for rel, _, want in PLANTED if want not in found]
        for rel, want in missed:
            print(f"self-test: planted in {rel}, not found: {want}")
        print(f"self-test: {len(PLANTED) - len(missed)} of {len(PLANTED)} planted breaches found")
        return 1 if missed else 0


def main():
    args = sys.argv[1:]
    if args[:1] == ["--self-test"]:
        return self_test(Path(args[1] if len(args) > 1 else "src"))
    src = Path(args[0] if args else "src")
    breaches = breaches_in(src)
    for b in breaches:
        print(b)
    if breaches:
        print(f"{len(breaches)} import(s) against the layers (scripts/import_directions.py)")
        return 1
    print(f"imports point down: {len(walk_modules(src))} modules checked")
    return 0


def breaches_in(src):
    modules = walk_modules(src)
    breaches = []
    edges = {}  # monitor's parts (its child modules) -> the parts they import
    for here, file in sorted(modules.items()):
        if not here or here[0] not in RANKED:
            continue
        mine = part_of(here)
        uses, qualified = uses_of(code_lines(file.read_text()))
        paths = [(pub, leaf) for pub, tree in uses for leaf in expand_use(tree)]
        paths += [(False, q) for q in qualified]
        for pub, path in paths:
            got = resolve(here, path, modules)
            if got is None:
                continue
            target, named, through_alias = got
            where = f"{file}: {'pub use' if pub else 'use'} {path}"
            if through_alias:
                breaches.append(f"{where}: goes through {'::'.join(named[: len(target) + 1])}, an alias")
            theirs = part_of(target)
            if here[:1] == target[:1] == ("monitor",) and len(here) > 1 and len(target) > 1:
                if here[1] != target[1]:
                    edges.setdefault(here[1], set()).add(target[1])
            if theirs and mine and theirs[2] > mine[2]:
                breaches.append(f"{where}: {mine[1]} imports {theirs[1]} above it")
            if pub and here[0] == "monitor":
                if named in modules:
                    breaches.append(f"{where}: re-exports the module {'::'.join(named)} under another path")
                elif named[: len(here)] != here:
                    breaches.append(f"{where}: re-exports what {'::'.join(target)} defines")
    breaches += [f"monitor: a circle of imports: {' -> '.join(c)}" for c in circles(edges)]
    return sorted(set(breaches))


if __name__ == "__main__":
    sys.exit(main())
