#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks every relative link and #anchor in README.md and docs/**/*.md.

A link [text](target) or image ![alt](target) outside code spans and fenced code blocks is checked when its target
is relative (not http:, https:, mailto:): the file or folder must exist, and an #anchor must name a heading of the
target Markdown file, by GitHub's rule (lower case; characters other than letters, digits, '_', '-' and spaces
dropped; spaces become '-'; repeated headings get -1, -2, ...), or an explicit <a id="..."> / <a name="...">.

Usage: scripts/check_links.py [ROOT] [FILE.md ...]   (default: the repository root, README.md and docs/**/*.md)
Exit status 0 when every link resolves, 1 otherwise (each broken link printed as file:line: message).
"""
import re
import sys
import unicodedata
from pathlib import Path

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+[^>]*(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
# [text](target) with one level of nested brackets in the text; the target may carry a "title".
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def strip_code_spans(line):
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def heading_text(raw):
    """The rendered text of a heading: inline code kept, links and emphasis reduced to their text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)                   # inline HTML tags
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|\*|(?<!\w)_(?!\w))", "", text)  # emphasis markers, not snake_case underscores
    return text


def slug(text):
    out = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch in " -" or cat[0] in "LNM" or cat == "Pc":
            out.append("-" if ch == " " else ch)
    return "".join(out)


def anchors_of(path, cache={}):
    if path in cache:
        return cache[path]
    found, counts, fenced = set(), {}, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in HTML_ANCHOR.finditer(line):
            found.add(m.group(1))
        h = HEADING.match(line)
        if h:
            base = slug(heading_text(h.group(2)))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    cache[path] = found
    return found


def links_of(path):
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in LINK.finditer(strip_code_spans(line)):
            yield number, m.group(1)


def check(root, files):
    errors = 0
    for md in files:
        for number, target in links_of(md):
            if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # empty, or an absolute URL (http:, https:, mailto:, ...)
            where = f"{md.relative_to(root)}:{number}"
            file_part, _, anchor = target.partition("#")
            dest = (md.parent / file_part).resolve() if file_part else md
            if file_part and not dest.exists():
                print(f"{where}: '{target}': {file_part} does not exist")
                errors += 1
                continue
            if anchor:
                if dest.is_dir() or dest.suffix.lower() != ".md":
                    print(f"{where}: '{target}': an anchor into a file that is not Markdown")
                    errors += 1
                elif anchor not in anchors_of(dest):
                    print(f"{where}: '{target}': no heading or anchor '{anchor}' in {dest.relative_to(root)}")
                    errors += 1
    return errors


def main(argv):
    root = Path(argv[1]).resolve() if len(argv) > 1 else Path(__file__).resolve().parent.parent
    if len(argv) > 2:
        files = [Path(a).resolve() for a in argv[2:]]
    else:
        files = [root / "README.md"] + sorted((root / "docs").rglob("*.md"))
    files = [f for f in files if f.exists()]
    errors = check(root, files)
    print(f"check_links: {len(files)} files, {errors} broken link(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
