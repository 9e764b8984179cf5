#!/usr/bin/env python3
"""Every link and cited file in the documents users read must resolve.

    python3 tests/docs/check_links.py [REPO_ROOT]

Reads README.md, every folder's README.md, docs/*.md and every
CMakeLists.txt (their comments cite files too). Dated results under
bench/results/ are records of what ran then and are not checked.

Checked:
- Markdown links `[text](target)` that are not URLs or anchors: the target
  (relative to the document) must exist.
- Cited paths: a word like `dir/file.ext` whose first part is a top-level
  entry of the repository must exist relative to the repository root (or
  relative to the citing file). A glob must match something. Paths that
  start elsewhere (PyTorch's aten/src/..., a user's /srv/...) are external
  and skipped.
- Bare document names in capitals (`DESIGN.md`): some tracked file must
  have that name, since a user cannot read a file the repository lacks.

Prints each dangling reference as FILE:LINE: TARGET and exits 1 if any.
"""
import glob
import os
import re
import subprocess
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(
    r"(?<![\w/.$<{-])((?:[\w.*-]+/)+[\w.*-]*\.(?:md|h|hpp|cpp|py|sh|json|cmake|txt|def|toml|cu|bfk|in|map|supp))\b")
CAPS_DOC = re.compile(r"(?<![\w/.-])([A-Z][A-Z_]+\.md)\b")


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True,
                             text=True, check=True).stdout
        return [f for f in out.splitlines() if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, _, names in os.walk(root):
            if "/.git" in d or "/build" in d:
                continue
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files


def documents(files):
    for f in files:
        name = os.path.basename(f)
        if f.startswith("bench/results/"):
            continue
        if name == "CMakeLists.txt" or name == "README.md" or \
           (f.startswith("docs/") and f.endswith(".md")):
            yield f


def exists(root, base_dir, target):
    for start in (base_dir, root):
        path = os.path.normpath(os.path.join(start, target))
        if any(c in target for c in "*?["):
            if glob.glob(path):
                return True
        elif os.path.exists(path):
            return True
    return False


def check(root):
    files = tracked_files(root)
    names = {os.path.basename(f) for f in files}
    top = {f.split("/", 1)[0] for f in files if "/" in f} | {".ci"}
    bad = []
    for doc in documents(files):
        base = os.path.join(root, os.path.dirname(doc))
        with open(os.path.join(root, doc), encoding="utf-8") as fh:
            lines = fh.read().splitlines()
        for no, line in enumerate(lines, 1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue
                target = target.split("#", 1)[0]
                if target and not exists(root, base, target):
                    bad.append(f"{doc}:{no}: link {target}")
            for target in PATH.findall(line):
                if "..." in target or target.startswith("/"):
                    continue
                first = target.split("/", 1)[0]
                if first not in top and not exists(root, base, target):
                    continue  # external (aten/src/..., a user's tree)
                if not exists(root, base, target):
                    bad.append(f"{doc}:{no}: file {target}")
            for name in CAPS_DOC.findall(line):
                if name not in names:
                    bad.append(f"{doc}:{no}: document {name} is not in the repository")
    return bad


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    bad = check(root)
    for b in bad:
        print(b)
    print(f"check_links: {len(bad)} dangling reference(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
