#!/usr/bin/env python3
"""Checks the front door and its rooms: README.md and docs/*.md of a source tree.

- every relative link resolves to a file, and a #fragment to a heading of the target
  (GitHub's anchor rule: lower case, punctuation dropped, spaces to hyphens, -1, -2, ... for
  repeats), outside fenced code;
- every docs/*.md page is linked from README.md, so a page is never orphaned;
- no heading names an issue ("Speed (issue 19)"): pages are named by topic;
- README.md stays a front page: at most --max-readme-lines lines.

Prints one line per problem (file:line: what) and exits 1 when there is any, 0 otherwise, 2 on
bad usage. --self-test builds a small tree with one problem of each kind and checks that each
is reported. Standard library only.
"""
import argparse
import os
import re
import sys
import tempfile

LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks."""
    in_code = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.startswith("```"):
                in_code = not in_code
                continue
            if not in_code:
                yield number, line.rstrip("\n")


def anchor(text):
    slug = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return slug.replace(" ", "-")


def headings(path):
    """(line number, heading text) of every heading of a markdown file."""
    return [(n, m.group(2)) for n, line in prose_lines(path) for m in [HEADING.match(line)] if m]


def anchors(path):
    seen = {}
    out = set()
    for _, text in headings(path):
        slug = anchor(text)
        repeat = seen.get(slug, 0)
        seen[slug] = repeat + 1
        out.add(slug if repeat == 0 else f"{slug}-{repeat}")
    return out


def check(root, max_readme_lines):
    # One spelling of every path ("./docs/a.md" and "docs/a.md" are one page).
    readme = os.path.normpath(os.path.join(root, "README.md"))
    docs_dir = os.path.normpath(os.path.join(root, "docs"))
    pages = sorted(os.path.join(docs_dir, name) for name in os.listdir(docs_dir)
                   if name.endswith(".md")) if os.path.isdir(docs_dir) else []
    problems = []
    if not os.path.isfile(readme):
        return [f"{readme}: missing"]
    linked = set()
    anchor_cache = {}
    for path in [readme] + pages:
        for number, line in prose_lines(path):
            for match in LINK.finditer(line):
                link = match.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # http:, https:, mailto:
                    continue
                target_part, _, fragment = link.partition("#")
                target = (os.path.normpath(os.path.join(os.path.dirname(path), target_part))
                          if target_part else path)
                if path == readme:
                    linked.add(target)
                if not os.path.exists(target):
                    problems.append(f"{path}:{number}: link '{link}': no file {target}")
                    continue
                if fragment and target.endswith(".md"):
                    if target not in anchor_cache:
                        anchor_cache[target] = anchors(target)
                    if fragment not in anchor_cache[target]:
                        problems.append(f"{path}:{number}: link '{link}': no heading "
                                        f"'#{fragment}' in {target}")
        for number, text in headings(path):
            if re.search(r"\bissues?\b", text, re.IGNORECASE):
                problems.append(f"{path}:{number}: heading '{text}' names an issue; name the topic")
    for page in pages:
        if page not in linked:
            problems.append(f"{page}: not linked from {readme}")
    with open(readme, encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    if lines > max_readme_lines:
        problems.append(f"{readme}: {lines} lines, expected at most {max_readme_lines} "
                        "(move the detail into docs/)")
    return problems


def self_test():
    """One problem of each kind in a small tree; each must be reported, and a clean tree not."""
    with tempfile.TemporaryDirectory() as root:
        os.mkdir(os.path.join(root, "docs"))

        def write(name, text):
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(text)

        write("README.md", "# t\n\n[a](docs/a.md#two-words) [b](docs/b.md)\n")
        write("docs/a.md", "# A\n\n## Two words\n\n```\n[not a link](nowhere.md)\n```\n")
        write("docs/b.md", "# B\n")
        clean = check(os.path.join(root, "."), 10)  # a root spelled with "./" too
        if clean:
            print("self-test: a clean tree reported:", *clean, sep="\n  ")
            return 1
        write("README.md", "# t\n\n[a](docs/a.md#three) [gone](docs/gone.md)\n"
                           "## Speed (issue 19)\n" + "x\n" * 10)
        found = "\n".join(check(root, 10))
        expected = ["no heading '#three'", "no file", "names an issue", "b.md: not linked",
                    "lines, expected at most 10"]
        missed = [e for e in expected if e not in found]
        if missed:
            print("self-test: not reported:", *missed, sep="\n  ")
            print("reported:\n" + found)
            return 1
    print("self-test: every kind of problem reported, a clean tree passes")
    return 0


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=".", help="the source tree (default .)")
    parser.add_argument("--max-readme-lines", type=int, default=350)
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args(argv)
    if args.self_test:
        return self_test()
    if not os.path.isdir(args.root):
        print(f"check_doc_links: root '{args.root}': not a directory", file=sys.stderr)
        return 2
    problems = check(args.root, args.max_readme_lines)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
