#!/usr/bin/env python3
"""Import cycles between the files of each crate under crates/: an edge a -> b where file a
names an item of file b by a `crate::`, `super::` or child-module path (following `pub use`
re-exports of lib.rs and mod.rs files). Test modules (`#[cfg(test)]` onwards) and comments
are left out.
Prints each cycle and exits 1 if there is one."""
import os, re, sys

def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ('lib', 'main'):
        return ()
    return tuple(rel[:-1]) if rel[-1] == 'mod' else tuple(rel)

def crate_edges(src):
    files = {}
    for d, _, names in os.walk(src):
        for n in names:
            if n.endswith('.rs'):
                files[module_of(src, os.path.join(d, n))] = os.path.join(d, n)
    texts = {}
    for m, f in files.items():
        t = open(f).read()
        cut = t.find('#[cfg(test)]')
        t = t if cut < 0 else t[:cut]
        texts[m] = re.sub(r'//.*', '', t)  # doc links are not imports
    is_dir = {m: os.path.basename(f) in ('lib.rs', 'main.rs', 'mod.rs') for m, f in files.items()}
    # Names a lib/mod file re-exports from a child: `pub use child::{A, B}` / `pub use child::A;`
    reexports = {}
    for m, t in texts.items():
        if not is_dir[m]:
            continue
        for child, body in re.findall(r'pub(?:\(crate\))? use (\w+)::([^;]+);', t):
            if m + (child,) in files:
                for name in re.findall(r'\b([A-Za-z_]\w*)\b', body):
                    reexports[(m, name)] = m + (child,)

    def resolve(base, parts):
        target, cur = base, base
        for p in parts:
            if cur + (p,) not in files and (cur, p) in reexports:
                return reexports[(cur, p)]
            cur = cur + (p,)
            if cur in files:
                target = cur
            else:
                break
        return target

    edges = {m: set() for m in files}
    for m, t in texts.items():
        here = m if is_dir[m] else m[:-1]          # the module whose children this file sees
        paths = [(k, r.strip(':').split('::')) for k, r in re.findall(r'\b(crate|super|self)((?:::\w+)+)', t)]
        for kind, rest, names in re.findall(r'\b(crate|super|self)((?:::\w+)*)::\{([^}]*)\}', t):
            prefix = [p for p in rest.split('::') if p]
            paths += [(kind, prefix + [n]) for n in re.findall(r'\b([A-Za-z_]\w*)\b', names) if n != 'self']
        for kind, parts in paths:
            base = {'crate': (), 'self': here, 'super': here[:-1] if is_dir[m] else here}[kind]
            if kind == 'super' and not is_dir[m]:
                base = m[:-1]
            edges[m].add(resolve(base, parts))
        if not is_dir[m] and re.search(r'^use super::\*;', t, re.M):
            edges[m].add(m[:-1])
        if is_dir[m]:
            # `use child::…` and calls such as `child::f(…)` (not `mod child;`).
            for child in re.findall(r'(?<![\w:])(\w+)::', t):
                if here + (child,) in files:
                    edges[m].add(here + (child,))
        edges[m].discard(m)
    return edges

def cycles(edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v); on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out

root = sys.argv[1] if len(sys.argv) > 1 else '.'
found = 0
for crate in sorted(os.listdir(os.path.join(root, 'crates'))):
    src = os.path.join(root, 'crates', crate, 'src')
    edges = crate_edges(src)
    name = lambda m: '/'.join(m) or 'lib'
    for comp in cycles(edges):
        found += 1
        print(f'{crate}: ' + ', '.join(
            f"{name(a)} -> {{{', '.join(sorted(name(b) for b in edges[a] if b in comp))}}}" for a in comp))
sys.exit(1 if found else 0)
