"""Draw one kernel's PC samples beside its source: the `proton-viewer --source` view.

Each row: a hot-line mark, the line's samples, its share of the kernel's samples, its top stall
reasons (share of the line's stalled samples), the line number and the highlighted code.
"""
from __future__ import annotations

import os
from itertools import accumulate

from rich.console import Group
from rich.syntax import Syntax
from rich.text import Text

from .names import readable
from .render import band, fold
from .source import CARRIED, KernelSamples, LineSamples, Samples, SourceFile, source_files
from .source_roots import SourceRoots

CONTEXT = 3
"""Unsampled lines shown before the first and after the last sampled line of a file."""
ELIDE = 12
"""A run of more unsampled lines than this between sampled ones is drawn as one `...` row."""
HOT, HOT_SHARE = 3, 0.05
"""Lines marked hot: the HOT with most samples, each with at least HOT_SHARE of the kernel's."""
MARK, HOT_STYLE = "▶", "bold red"
MIN_CODE = 20
"""Narrower than this, code overflows the width rather than fold into slivers."""
CODE_ROOM = 40
"""Below this many columns for the code, each line shows its top stall reason only."""
HEADERS = ("samples", "%", "top stalls", "line")


def source_view(kernel: KernelSamples, roots: SourceRoots, *, width: int | None = None,
                style: str = "folded") -> Group:
    """The kernel's summary line, then each file's window of lines beside their samples (the
    code of files under `roots` only).

    width: fold code lines to fit it (None: one output line per source line, for grep).
    style: how the kernel's name is shown (names.STYLES).

    Usage:
        roots = SourceRoots.default(["run.hatchet"])
        console.print(source_view(find_kernel(load("run.hatchet"), "matmul"), roots, width=100))
    """
    out = [summary(kernel, style)]
    if kernel.lines and kernel.no_lines:
        out.append(Text(f"not mapped to a line: {'; '.join(kernel.no_lines)}", style="yellow"))
    if not kernel.lines:
        return Group(*out, *_no_lines(kernel))
    hot = hot_lines(kernel)
    for sf in source_files(kernel, roots):
        out.append(Text())
        out += _file(sf, kernel.total.samples, hot, width)
    return Group(*out)


def summary(kernel: KernelSamples, style: str = "folded") -> Text:
    """One line: name (as `style` shows it), samples, stalled share and top reasons, call
    paths, unmapped samples."""
    total = kernel.total
    stalled = total.stalled / total.samples if total.samples else 0.0
    paths = f"{kernel.paths} call path{'s' * (kernel.paths != 1)}"
    text = Text().append(readable(kernel.name, style), style="bold")
    text.append(f": {total.samples:,.0f} samples, {stalled:.1%} stalled")
    if total.stalled:
        text.append(f" ({stalls(total, 3)})")
    text.append(f", {paths}, {kernel.unmapped:,.0f} samples not mapped to a line")
    return text


def stalls(counts: Samples, n: int) -> str:
    """`long_scoreboard 61%, wait 20%`: the top `n` reasons, as shares of the stalled samples."""
    return ", ".join(f"{reason} {share:.0%}" for reason, share in counts.top_stalls(n))


def hot_lines(kernel: KernelSamples) -> set[tuple[str, int]]:
    """(file, line) of the hottest lines worth a mark."""
    total = kernel.total.samples
    return {(ls.file, ls.line) for ls in kernel.lines[:HOT]
            if total and ls.counts.samples / total >= HOT_SHARE}


def window(sampled: list[int], last: int) -> list[int | None]:
    """Line numbers to draw (None: an elided run), CONTEXT lines around the sampled ones.

    sampled: the sampled line numbers, ascending; last: the file's last line."""
    first = min(sampled[0], max(1, sampled[0] - CONTEXT))  # a line 0 too, if sampled
    out: list[int | None] = list(range(first, sampled[0] + 1))
    for prev, line in zip(sampled, sampled[1:]):
        if line - prev - 1 > ELIDE:
            out += [*range(prev + 1, prev + CONTEXT + 1), None, *range(line - CONTEXT, line + 1)]
        else:
            out += range(prev + 1, line + 1)
    return out + list(range(sampled[-1] + 1, min(last, sampled[-1] + CONTEXT) + 1))


def _file(sf: SourceFile, total: float, hot: set, width: int | None) -> list[Text]:
    share = sf.samples / total if total else 0.0
    out = [Text(f"{sf.path}: {sf.samples:,.0f} samples ({share:.1%} of the kernel)",
                style="bold")]
    if sf.read_from == CARRIED:
        out.append(Text("its text as the profile carries it (the code that ran)", style="dim"))
    elif sf.read_from is not None and os.path.realpath(sf.read_from) != os.path.realpath(sf.path):
        out.append(Text(f"its text read from {sf.read_from} on this machine", style="dim"))
    code = _highlight(sf.path, sf.text) if sf.text is not None else None
    if code is None:
        out.append(Text(f"{sf.why}; the sampled lines only", style="yellow"))
        numbers: list[int | None] = list(sorted(sf.lines))
    else:
        numbers = window(sorted(sf.lines), len(code))
        past = [n for n in sf.lines if n > len(code)]
        if past:
            out.append(Text(f"the file has {len(code)} lines but line {max(past)} was sampled; "
                            "it changed since the profile", style="yellow"))
    cells, widths = _columns(sf, numbers, total, 2)
    if width is not None and code is not None \
            and width - _lead(widths) < CODE_ROOM:  # narrow: the top reason only
        cells, widths = _columns(sf, numbers, total, 1)
    title = None if code is None else Text("source", style="bold")
    out += _fold(_row(HEADERS, widths, title, style="bold"), width)
    for n in numbers:
        if n is None:
            out += _fold(_row(("", "", "", "..."), widths, Text(""), style="dim"), width)
            continue
        ls = sf.lines.get(n)
        line = None if code is None else (code[n - 1].copy() if 1 <= n <= len(code) else Text(""))
        is_hot = (sf.path, n) in hot
        if line is not None and ls is None:
            line.stylize("dim")
        elif line is not None and is_hot:
            line.stylize("bold")
        out += _fold(_row(cells[n], widths, line, hot=is_hot, sampled=ls is not None,
                          share=ls.counts.samples / total if ls and total else None), width)
    return out


def _columns(sf: SourceFile, numbers: list, total: float, reasons: int) -> tuple[dict, list]:
    """The cells of each drawn line, and each column's width (its header's at least)."""
    cells = {n: _cells(sf.lines.get(n), total, reasons) for n in numbers if n is not None}
    widths = [max([len(h)] + [len(c[i]) for c in cells.values()])
              for i, h in enumerate(HEADERS)]
    widths[3] = max(widths[3], 3)  # room for "..."
    return cells, widths


def _lead(widths: list[int]) -> int:
    """Columns before the code: mark, the cells and their gaps, ` │ `."""
    return 2 + widths[0] + 2 + widths[1] + 2 + widths[2] + 2 + widths[3] + 3


def _cells(ls: LineSamples | None, total: float, reasons: int) -> tuple[str, str, str, str]:
    if ls is None:
        return "", "", "", ""
    share = ls.counts.samples / total if total else 0.0
    return f"{ls.counts.samples:,.0f}", f"{share:.1%}", stalls(ls.counts, reasons), str(ls.line)


def _row(cells, widths: list[int], code: Text | None, *, style: str = "", hot: bool = False,
         sampled: bool = False, share: float | None = None) -> Text:
    """mark samples  %  stalls  line │ code; `code` None: no code column."""
    samples, pct, why, line = cells
    lead = HOT_STYLE if hot else style
    text = Text().append(MARK if hot else " ", style=HOT_STYLE if hot else "")
    text.append(" " + samples.rjust(widths[0]), style=lead)
    text.append("  " + pct.rjust(widths[1]),
                style=lead or (band(share, 1.0) if share is not None else ""))
    text.append("  " + why.ljust(widths[2]), style=style)
    line_style = "bold" if hot else (style or ("" if sampled else "dim"))
    text.append("  " + line.rjust(widths[3]), style=line_style)
    if code is not None:
        text.append(" │ ", style="dim")
        text.append_text(code)
    return text


def _fold(row: Text, width: int | None) -> list[Text]:
    """The row, its code folded onto more lines under the `│` when it passes the width (after
    separators and spaces, as tree names fold).
    Rows never wrap again (a row wider than the width overflows it rather than break)."""
    row.no_wrap, row.overflow = True, "ignore"
    lead = row.plain.find(" │ ") + 3
    if width is None or row.cell_len <= width or lead < 3:  # lead < 3: no code to fold
        return [row]
    room = max(MIN_CODE, width - lead)
    ends = list(accumulate(len(p) for p in fold(row.plain[lead:], room)))
    pieces = row.divide(lead + end for end in ends[:-1])
    rest = [Text(" " * (lead - 3), no_wrap=True, overflow="ignore").append(" │ ", style="dim")
            .append_text(p) for p in pieces[1:]]
    pieces[0].no_wrap, pieces[0].overflow = True, "ignore"
    return [pieces[0], *rest]


def _highlight(path: str, text: str) -> list[Text]:
    """The file's lines with syntax colours (lexer from the file name), tabs expanded."""
    lexer = Syntax.guess_lexer(path, code=text)
    syntax = Syntax(text, lexer, theme="ansi_dark", background_color="default")
    lines = syntax.highlight(text).split("\n", allow_blank=True)
    count = text.count("\n") + (not text.endswith("\n"))
    return list(lines)[:count]


def _no_lines(kernel: KernelSamples) -> list[Text]:
    reason = "; ".join(kernel.no_lines) or "no line children in this profile"
    out = [Text(f"no source lines: {reason}", style="yellow")]
    total = kernel.total
    ranked = sorted(((r, v) for r, v in total.stalls.items() if v > 0), key=lambda rv: -rv[1])
    if ranked:
        out.append(Text("stall reasons (share of the stalled samples):", style="bold"))
        w = max(len(f"{v:,.0f}") for _, v in ranked)
        out += [Text(f"  {v:,.0f}".rjust(w + 2) + f"  {v / total.stalled:6.1%}  {r}")
                for r, v in ranked]
    return out
