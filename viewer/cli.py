"""The `proton-viewer` command: list metrics, or show the call tree with derived metrics."""
from __future__ import annotations

import contextlib
import gc
import warnings
from dataclasses import dataclass

import click

from ..format import CPU_TIME, TRACE_EXTENSION, TREE_EXTENSION
from . import deep
from .errors import ViewerError
from .names import STYLES
from .select import FORMATS, SHORT

DISTRIBUTION = "proton-profiler"

EPILOG = """\b
Examples:
  proton-viewer run1.hatchet                     # tree with kernel (or CPU) time in ms
  proton-viewer -l run1.hatchet                  # metrics the file has and can derive
  proton-viewer -m time/ms,avg_time/us,count run1.hatchet
  proton-viewer -m tflop16/s,util,time/% -d 3 run1.hatchet
  proton-viewer -i '.*attn' -t 0.05 run1.hatchet # frames named *attn*, >= 0.05 ms
  proton-viewer --print-sorted -m time/us run1.hatchet
  proton-viewer -m time/ms --output csv run1.hatchet > run1.csv
  proton-viewer --output triton -m time/ms run1.hatchet  # Triton's viewer's text
  proton-viewer -m time/ms -diff before.hatchet after.hatchet  # after minus before
  cat run1.hatchet | proton-viewer -m time/ms -  # FILE - reads stdin
  proton-viewer -m num_samples,num_stalled_samples run1.hatchet  # PC samples per frame
  proton-viewer --source matmul_kernel run1.hatchet  # its samples beside its source lines
  proton-viewer -m time/ms,comm/% ddp.rank*.hatchet  # ranks merged: sum, min/mean/max, imbalance
  proton-viewer --rank 1 ddp.rank*.hatchet       # one rank of them (or a folder of them)
  proton-viewer --output trace ddp.rank*.chrome_trace > ddp.json  # one timeline for Perfetto
  proton-viewer --html run1.html run1.hatchet   # one page, a tab per view the file has
  proton-viewer --diagnose run1.hatchet          # why kernels are slow, and what to try
"""


def _version(ctx: click.Context, _param, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        number = version(DISTRIBUTION)
    except PackageNotFoundError:
        number = f"unknown ({DISTRIBUTION} is not installed)"
    # Triton's wheel installs a proton-viewer too: say which of the two this is, as `proton` does
    click.echo(f"proton-viewer {number} ({DISTRIBUTION}, not Triton's own viewer: that one runs "
               "as python -m triton.profiler.viewer)")
    ctx.exit()


@dataclass(frozen=True, slots=True)
class ViewOptions:
    """What the command line asks for (the command's parameters, by their names), built once
    from click's arguments and passed to each step of the view."""

    list_metrics: bool
    metrics: str | None
    include: str | None
    exclude: str | None
    threshold: float | None
    depth: int
    name_format: str
    """-f; by default short in the tree, full in rows for scripts (other tools' names)."""
    name_style: str
    collapse_libraries: bool
    print_sorted: bool
    other: str | None
    """-diff's OTHER profile."""
    output: str
    width: int | None
    diagnose: bool
    html_path: str | None
    warps: bool
    rank: int | None
    kernel: str | None
    """--source's KERNEL."""
    source_roots: tuple[str, ...]
    source_maps: tuple[str, ...]
    profiles: tuple[str, ...]


class _Command(click.Command):
    """Long options may be cut to any unique start (--met for --metrics), as Triton's viewer
    (argparse) takes them."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        longs = [o for p in self.get_params(ctx) for o in (*p.opts, *p.secondary_opts)
                 if o.startswith("--")]
        return super().parse_args(ctx, expand_prefixes(args, longs))


def expand_prefixes(args: list[str], longs: list[str]) -> list[str]:
    """`args` with each `--start[=value]` before `--` that begins exactly one of `longs`
    written whole."""
    out = list(args)
    for i, arg in enumerate(args):
        if arg == "--":
            break
        start, eq, value = arg.partition("=")
        if start.startswith("--") and start not in longs:
            found = [o for o in longs if o.startswith(start)]
            if len(found) == 1:
                out[i] = found[0] + eq + value
    return out


@click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]},
               epilog=EPILOG)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Print the version and exit.")
@click.option("-l", "--list", "list_metrics", is_flag=True, help="List the metrics and exit.")
@click.option("-m", "--metrics", default=None,
              help="Comma-separated metrics, e.g. time/ms,avg_time/us,count,tflop16/s,util,time/% "
              "(default: time/ms, or cpu_time/ms for a profile without kernels; then num_samples "
              "for a PC-sampled one).")
@click.option("-i", "--include", default=None, metavar="REGEX",
              help="Show only frames whose name matches (from its start, as in Triton's viewer; "
              "the name as the file has it or as shown, demangled), with their callers and "
              "callees.")
@click.option("-e", "--exclude", default=None, metavar="REGEX",
              help="Hide frames whose name matches (as the file has it or as shown: -e 'at::' "
              "hides torch's kernels), and everything under them.")
@click.option("-t", "--threshold", type=float, default=None,
              help="Hide frames whose first metric is below this value.")
@click.option("-d", "--depth", type=click.IntRange(min=1), default=100, show_default=True,
              help="Levels of the tree to show, as Triton's viewer counts them: 1 shows ROOT "
              "alone, 2 ROOT and its children.")
@click.option("-f", "--format", "name_format", type=click.Choice((SHORT, *FORMATS)),
              default=None, show_default="short for the tree, full for --output json/csv/triton",
              help="How to print `file:line@function` frame names (python frames, source "
              "lines): short, as the --html page shows them (`step (train.py:40)`), full (as "
              "the file has them, as Triton's viewer prints them), or one of Triton's "
              "shortenings.")
@click.option("--names", "name_style", type=click.Choice(STYLES), default="folded",
              show_default=True, help="C++ kernel names: demangled with template arguments "
              "folded (folded), demangled whole (full), or as the file has them (raw).")
@click.option("--collapse-libraries/--no-collapse-libraries", default=True, show_default=True,
              help="In python call paths, draw each run of frames in installed packages "
              "(torch, triton, ...) or the standard library as its first frame, marked with how "
              "many it stands for; the file keeps them all.")
@click.option("--print-sorted", is_flag=True,
              help="After the tree, a flat table of the frames, hottest first.")
@click.option("--output", type=click.Choice(["tree", "json", "csv", "trace", "triton"]),
              default="tree", show_default=True,
              help="json/csv: the shown rows for scripts, no tree drawing. "
              "trace: merge .chrome_trace files (proton -d trace; a job's ranks) into one "
              "Chrome trace on stdout, each rank's GPUs and host on their own process tracks, "
              "aligned in time. triton: what Triton 3.6's proton-viewer prints, byte for byte, "
              "with its options (-l, -m, -i, -e, -t, -d, -f, --print-sorted, -diff) and numbers "
              "(nothing without -m, as there), for scripts that parse it.")
@click.option("-diff", "--diff-profile", "other", default=None, metavar="OTHER.hatchet",
              help="Show FILE minus OTHER per frame (matched by path; a frame missing on one "
              "side counts 0 there) and the change in % of OTHER, largest change (slower or "
              "faster) first; filters and -t use the change. "
              "OTHER may be - (stdin).")
@click.option("--width", type=click.IntRange(min=40), default=None,
              help="Terminal width to draw for (long names fold onto more lines; never cut).")
@click.option("--diagnose", is_flag=True,
              help="Instead of the tree: findings on why kernels are slow (too few programs, "
              "tail effect, low occupancy, far from the roofline, launch-bound scopes, "
              "stall-dominated lines), grouped by kernel or scope, most wall time to save "
              "first, each with one thing to try; "
              "--output json for scripts.")
@click.option("--html", "html_path", default=None, metavar="REPORT.html",
              help="Write one self-contained page (no network) instead of the tree, with the "
              "tabs the profile has: flame graph (widths: the first -m metric), kernels, "
              "roofline, source (heat of sampled lines), findings (--diagnose), warps (kernel "
              "scopes); several rank files are merged. A new regular file replaces "
              "an earlier page, a link or a FIFO at REPORT.html, never a profile or another "
              "file; - (or /dev/stdout) writes to standard output.")
@click.option("--warps", is_flag=True,
              help="Instead of the tree: each kernel scope (backend='instrumentation') across "
              "warps: events, min/median/max cycles, cycles per warp, imbalance (max/median).")
@click.option("--rank", type=click.IntRange(min=0), default=None,
              help="Of several rank files (or a folder of them): show rank R's alone.")
@click.option("--source", "kernel", default=None, metavar="KERNEL",
              help="Instead of the tree: the PC samples of KERNEL (its name as the file has "
              "it, as the tree shows it or as c++filt prints it, else a regex searched in the raw "
              "and demangled names) per source line, over all its "
              "call paths, beside its source (a profile from `proton -m pcsampling`).")
@click.option("--source-root", "source_roots", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False),
              help="With --source and --html: also show source files under DIR (repeatable). "
              "Source is read only under the profile's folder, the current folder and these, "
              "never from /proc, /dev or /sys: a profile names its files itself. A path not "
              "found as the profile names it is looked for by its longest ending under each.")
@click.option("--source-map", "source_maps", multiple=True, metavar="OLD=NEW",
              help="With --source and --html: read a source path that starts with the folder "
              "OLD (the recording machine's) from NEW here instead; NEW becomes a source root "
              "(repeatable). A profile that carries its source needs none.")
# required by hand (_check_profiles_given): click's "Missing argument" cannot say that --html
# took the profile as its page's name
@click.argument("profiles", metavar="FILE.hatchet...", nargs=-1)
@click.pass_context
def viewer(ctx: click.Context, **options) -> None:
    """Show the call tree of a Proton profile (ours or Triton's Proton's); FILE - reads it
    from stdin. Several files, or a folder, must be one job's ranks (NAME.rank<R>.hatchet of
    one run): one tree over all of them, frames matched by call path, each metric summed
    and, per frame, its min, mean and max over the ranks, the rank of the max and max/mean
    (the imbalance); a frame only some ranks have is marked.

    Filters only choose what is shown: every number is the frame's own measurement."""
    with warnings.catch_warnings():
        _ignore_library_noise()
        if options["name_format"] is None:  # rows for scripts keep the names other tools print
            options["name_format"] = SHORT if options["output"] == "tree" else "full"
        try:
            _view(ctx, ViewOptions(**options))
        finally:
            gc.unfreeze()  # what _kept froze is collectable again (tests run views in-process)


@contextlib.contextmanager
def _kept():
    """What is made inside lives until the command ends: Python's collector is off meanwhile
    (each full collection rescans every object: a 100,000-frame view's million) and what was
    made is frozen out of it (gc.freeze) before it is on again, or its first allocation may
    start a full collection (0.65 s at the end of a 100,000-frame -diff). The command
    unfreezes them as it ends (tests run views in-process)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()


LIBRARY_NOISE = (r"DataFrame is highly fragmented|(divide by zero|invalid value|overflow|"
                 r"underflow) encountered|Mean of empty slice|All-NaN (slice|axis) encountered|"
                 r"Degrees of freedom <= 0")
"""What pandas and numpy warn of that the viewer's own output already covers: a table of
many metrics built a column at a time, and arithmetic on the NaN and infinite values the
viewer shows blank (each view says why, in its notes)."""


def _ignore_library_noise() -> None:
    """Within a warnings.catch_warnings(): LIBRARY_NOISE not printed (with its source line)."""
    warnings.filterwarnings("ignore", message=LIBRARY_NOISE)


def _view(ctx: click.Context, opts: ViewOptions) -> None:
    profiles = opts.profiles
    try:
        _check_profiles_given(ctx, profiles, opts.html_path)
        _check_report_conflicts(opts)
        if opts.output == "triton":
            _check_triton_conflicts(ctx, profiles, opts.name_format)
            with _kept():
                deep.call(_show_triton, opts)
            return
        if opts.output == "trace":
            _check_trace_conflicts(opts)
            from .traces import write_merged

            errors, notes = write_merged(list(profiles), lambda text: click.echo(text, nl=False))
            click.echo()
            for error in errors:
                click.echo(f"Error: {error}", err=True)
            for note in notes:
                click.echo(f"note: {note}", err=True)
            ctx.exit(_Failed.exit_code if errors else 0)
        if sum(x is not None and x is not False for x in (
                opts.kernel, opts.html_path, opts.diagnose or None, opts.warps or None)) > 1:
            raise ViewerError("--source, --html, --diagnose and --warps each replace the tree; "
                              "give one")
        if opts.warps:
            from . import warps as warp_view
            from .reader import parse

            for path in profiles:
                found = warp_view.rows(deep.call(parse, path).root)
                click.echo((f"{path}:\n" if len(profiles) > 1 else "")
                           + warp_view.render(found), nl=False)
            return
        # In a thread with a large stack: a profile may be nested any number of levels deep.
        if (opts.html_path or opts.diagnose) and opts.other is not None:
            raise ViewerError("-diff shows a difference as a tree; --html and --diagnose read "
                              "one profile (or a job's ranks): drop -diff")
        if opts.kernel is not None:
            _check_source_conflicts(opts)
        else:
            _check_conflicts(opts)
        with _kept():  # the view's frames, rows and cells are kept to its end
            errors = _open_and_show(opts, profiles)
    except ViewerError as exc:
        raise _Failed(str(exc)) from None
    if errors:
        ctx.exit(_Failed.exit_code)


def _open_and_show(opts: ViewOptions, profiles) -> list[str]:
    """Read the profiles and show the view the options ask for; the files that could not be
    read, one line each."""
    profile, merged, errors = deep.call(_open, list(profiles), opts.rank, opts.other,
                                        opts.kernel)
    for error in errors:  # the files that could not be read; the others still show
        click.echo(f"Error: {error}", err=True)
    from .source_roots import SourceRoots

    roots = SourceRoots.default(list(profiles), list(opts.source_roots),
                                list(opts.source_maps))
    # --source's and --html's
    roots = roots.beside_profile(profile.gf.graph.roots[0], profile.job)
    if opts.kernel is not None:
        deep.call(_show_source, opts.kernel, opts.width, opts.name_style, profile, roots)
    elif opts.diagnose:
        deep.call(_show_findings, profile, opts.name_style, opts.output, merged)
    elif opts.html_path is not None:
        deep.call(_write_html, opts.html_path, opts, profile, merged, roots)
    else:
        deep.call(_show, opts, profile, merged)
    return errors


def _open(profiles: list[str], rank: int | None, other, kernel):
    """(the profile to show, or None when several ranks merge; the merged ranks or None;
    one line per file that could not be read)."""
    import os

    from .reader import STDIN

    if STDIN in profiles and other == STDIN:
        raise ViewerError("FILE and -diff OTHER are both '-'; stdin holds one profile, give the "
                          "other as a file")
    if len(profiles) == 1 and rank is None and not os.path.isdir(profiles[0]):
        return _job_or_one(_load(profiles[0]))
    from . import ranks

    paths = ranks.expand(profiles)
    if rank is None and len(paths) == 1:
        return _job_or_one(_load(paths[0]))
    if rank is not None:
        path, errors = ranks.pick(paths, rank)
        return _load(path), None, errors
    if other is not None or kernel is not None:
        raise ViewerError(f"{'-diff' if other is not None else '--source'} reads one profile, "
                          f"and {len(paths)} were given; choose one with --rank R")
    found, frames, errors = ranks.read(paths)
    merged = ranks.merge(found, frames)
    for note in merged.notes:  # what the reader should know; every file given was read
        click.echo(f"note: {note}", err=True)
    return merged.total, merged, errors


def _job_or_one(profile):
    """(profile, its job's Merged when it is a job file, no errors)."""
    if profile.job_ranks is None:
        return profile, None, []
    from .ranks import from_job

    merged = from_job(profile)
    return merged.total, merged, []


def _load(path: str):
    """reader.load, its notes on stderr."""
    from .reader import load

    profile = load(path)
    for note in profile.notes:
        click.echo(f"note: {note}", err=True)
    return profile


class _Failed(click.ClickException):
    """Printed by click as `Error: ...` on stderr, exit status 2."""

    exit_code = 2


def _show(opts: ViewOptions, prof, merged) -> None:
    from rich.console import COLOR_SYSTEMS, Console

    from . import export, render
    from .demangle import declined, declined_note
    from .derive import available
    from .diff import diff_columns
    from .select import display_names, fold_names, library_frames, visible_nodes
    from .errors import listing
    from .names import readable
    from .source import no_lines_notes

    other, output, width = opts.other, opts.output, opts.width
    console = Console(width=width)
    empty = None if prof.inclusive or prof.exclusive else _no_metrics_note(prof)
    if opts.list_metrics:
        if empty:
            click.echo(empty)
            return
        # cpu_time is kept per node (never summed up the tree), but a scope's time holds its
        # children's: for the reader it is inclusive
        spans = [m for m in prof.exclusive if m == CPU_TIME]
        for label, names in (("inclusive: ", prof.inclusive + spans),
                             ("exclusive: ", [m for m in prof.exclusive if m not in spans]),
                             ("derived:   ", available(prof))):
            console.print(label + (", ".join(names) or "(none)"), soft_wrap=True, markup=False)
        return
    metrics = opts.metrics
    if metrics is None and not empty:
        metrics = _default_metric(prof)
        if metrics is None:
            raise ViewerError("the profile holds no time metric; choose one with -m "
                              "(see proton-viewer -l FILE)")
    specs = [] if metrics is None else [spec for spec in metrics.split(",") if spec.strip()]
    if metrics is not None and not specs:
        raise ViewerError("-m names no metric; e.g. -m time/ms,count")
    if other is not None:
        theirs = _load(other)
        columns = diff_columns(prof, theirs, _cpu_fallback(prof, specs))
    else:
        columns = _metric_columns(prof, merged, specs)
    visible = None
    notes = [empty] if empty else []
    for note in dict.fromkeys(n for c in columns for n in c.notes):  # cells left blank, and why
        click.echo(f"note: {note}", err=True)
    before = declined()
    names = display_names(prof.gf, opts.name_format, opts.name_style)
    if declined() > before:  # the demangled text of all names reached its bound
        notes.append(declined_note(declined() - before))
    if opts.include or opts.exclude or opts.threshold is not None:
        first = columns[0].values.to_dict() if columns else {}
        chosen = {n: abs(v) for n, v in first.items()} if other is not None else first
        visible = visible_nodes(prof.gf, chosen, include=opts.include, exclude=opts.exclude,
                                threshold=opts.threshold, displayed=names)
        roots = set(prof.gf.graph.roots)
        if not visible - roots and any(r.children for r in roots):
            notes.append(_nothing_matches(opts.include, opts.exclude, opts.threshold, columns))
    folded = library_frames(prof.gf) if opts.collapse_libraries else None
    if folded:
        names = fold_names(prof.gf, names, folded)
    if merged is not None:
        from .ranks import markers

        for node, mark in markers(merged).items():
            names[node] += mark
    if output != "tree":
        table = export.rows(prof.gf, columns, depth=opts.depth, visible=visible, names=names,
                            folded=folded, diff=other is not None)
        click.echo(export.to_json(table) + "\n" if output == "json" else export.to_csv(table),
                   nl=False)
        for note in notes:  # the rows stay machine-readable
            click.echo(note, err=True)
        return
    # On a terminal long names fold at its width; piped output keeps each name on one line
    # (for grep and diff) unless --width asks for folding.
    fold_at = console.width if console.is_terminal or width else None
    # color_system is None where rich found no colours: no system, as .get(None) gave
    color = COLOR_SYSTEMS.get(console.color_system or "") if console.is_terminal else None
    headers = [c.header for c in columns]
    write = console.file.write
    diff = other is not None
    if merged is not None:
        from .ranks import span

        write(f"{render.plural(len(merged.labels), 'rank')} ({span(merged.labels)}) merged: "
              "each metric over all ranks, then per frame its min, mean and max over them, the "
              "rank of the max and max/mean\n")
    render.draw(render.tree_rows(prof.gf, columns, depth=opts.depth, visible=visible, names=names,
                                 diff=diff, folded=folded), headers, write, width=fold_at,
                color=color)
    if console.is_terminal and columns:
        top = render.by_id(columns[0].values).get(prof.gf.graph.roots[0]._hatchet_nid)
        console.print(render.legend(columns, top, diff))
    if opts.print_sorted and columns:
        write(f"\nFrames sorted by {columns[0].header}:\n")
        render.draw(render.sorted_rows(prof.gf, columns, visible=visible, names=names, diff=diff),
                    headers, write, width=fold_at, color=color)
    for reason, partial, kernels in no_lines_notes(prof):
        what = "samples not mapped to a source line" if partial else "samples but no source lines"
        shown = listing([render.printable(readable(k, opts.name_style)) for k in kernels], most=4)
        if len(kernels) > 1 and reason.startswith("its "):  # the recorder's reason is per kernel
            reason = "each one's " + reason[4:]
        write(f"{render.plural(len(kernels), 'kernel')} ({shown}) "
              f"{'has' if len(kernels) == 1 else 'have'} {what}: {reason}\n")
    for note in notes:
        write(note + "\n")


def _show_triton(opts: ViewOptions) -> None:
    """What Triton 3.6's proton-viewer prints for these options (its main), through our
    triton_api; what our reader notes goes to stderr."""
    from . import triton_api as api

    include, exclude, threshold, other = opts.include, opts.exclude, opts.threshold, opts.other
    path = opts.profiles[0]
    if include and exclude:
        raise ViewerError("Triton's viewer takes -i or -e, not both; give one (our own view, "
                          "without --output triton, takes both)")
    with warnings.catch_warnings(record=True) as notes:
        warnings.simplefilter("always")
        _ignore_library_noise()
        if opts.list_metrics:
            api.show_metrics(path)
        elif opts.metrics:
            specs = opts.metrics.split(",")
            gf, derived = api.parse(specs, path, include, exclude, threshold)
            if other is not None:
                gf = api.apply_diff_profile(gf, derived, other, specs, include, exclude,
                                            threshold)
            api.print_tree(gf, derived, opts.depth, opts.name_format, opts.print_sorted)
        else:
            click.echo("note: Triton's viewer prints nothing without -m; e.g. -m time/ms",
                       err=True)
    for note in dict.fromkeys(str(n.message) for n in notes):  # -diff reads two alike
        click.echo(f"note: {note}", err=True)


TRITON_OPTIONS = {"list_metrics", "metrics", "include", "exclude", "threshold", "depth",
                  "name_format", "print_sorted", "other", "output", "profiles"}
"""What --output triton takes: Triton's viewer's options."""


def _check_triton_conflicts(ctx: click.Context, profiles, name_format: str) -> None:
    from click.core import ParameterSource

    given = [p for p in ctx.command.params if p.name not in TRITON_OPTIONS
             and ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE]
    if name_format == SHORT:
        raise ViewerError(f"Triton's viewer has no -f {SHORT}; give one of its formats "
                          f"({', '.join(FORMATS)}) with --output triton")
    if given:
        raise ViewerError(f"--output triton prints what Triton's viewer prints and takes its "
                          f"options only; drop {'/'.join(p.opts[0] for p in given)}")
    if len(profiles) > 1:
        raise ViewerError("--output triton reads one profile, as Triton's viewer does; give one "
                          "(or drop --output triton to merge ranks)")


def _show_findings(prof, style: str, output: str, merged=None) -> None:
    import json

    from .diagnose import as_dicts, diagnose, render

    diagnosis = diagnose(prof, style, merged)
    if output == "json":
        click.echo(json.dumps(as_dicts(diagnosis), indent=1))
    else:
        click.echo(render(diagnosis), nl=False)


def _default_metric(prof) -> str | None:
    """Kernel time, or the scopes' CPU time in a profile without kernels; and the PC samples
    of a sampled profile."""
    from ..format import NUM_SAMPLES
    from .derive import available

    have = available(prof)
    time = next((m for m in ("time/ms", "cpu_time/ms") if m in have), None)
    if time is not None and NUM_SAMPLES in prof.inclusive:
        return f"{time},{NUM_SAMPLES}"  # source-line frames have samples but no time
    return time


def _metric_columns(prof, merged, specs: list[str]) -> list:
    """Each spec's column: over a job's ranks (with their spread) when merged."""
    from .derive import derive, expand_vectors

    if merged is not None:
        from .ranks import columns as rank_columns

        specs = _cpu_fallback(merged.total, specs)
        return rank_columns(merged, expand_vectors(merged.total, specs))
    return [derive(prof, spec) for spec in expand_vectors(prof, _cpu_fallback(prof, specs))]


def _cpu_fallback(prof, specs: list[str]) -> list[str]:
    """derive.cpu_fallback, its notes on stderr."""
    from .derive import cpu_fallback

    specs, notes = cpu_fallback(prof, specs)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    return specs


def _write_html(path: str, opts: ViewOptions, prof, merged, roots) -> None:
    import os

    from .html import page
    from .select import display_names, library_frames, visible_nodes

    metrics, profiles = opts.metrics, opts.profiles
    if metrics is None:
        metrics = _default_metric(prof)
    specs = [s for s in (metrics or "").split(",") if s.strip()]
    columns = _metric_columns(prof, merged, specs)
    visible = None
    if opts.include or opts.exclude or opts.threshold is not None:
        first = columns[0].values.to_dict() if columns else {}
        shown = display_names(prof.gf, SHORT, opts.name_style) \
            if opts.include or opts.exclude else None
        visible = visible_nodes(prof.gf, first, include=opts.include, exclude=opts.exclude,
                                threshold=opts.threshold, displayed=shown)
    title = ", ".join(os.path.basename(p.rstrip("/")) or p for p in profiles[:3]) + (
        f" and {len(profiles) - 3} more" if len(profiles) > 3 else "")
    text = page(prof, columns, title=f"Proton: {title}", roots=roots, merged=merged,
                visible=visible, depth=opts.depth, style=opts.name_style,
                folded=library_frames(prof.gf) if opts.collapse_libraries else None)
    from ..files import STANDARD_STREAMS, write_whole  # what stands at `path` is replaced

    try:
        write_whole(path, text)
    except OSError as exc:
        raise ViewerError(f"cannot write {path!r}: {exc.strerror or exc}; give a writable "
                          "file name, or - for standard output") from None
    if path not in STANDARD_STREAMS:
        from .render import size

        click.echo(f"wrote {path} ({size(len(text.encode()))}); open it in a browser", err=True)


def _no_metrics_note(prof) -> str:
    """Why a profile without any metric shows names only, and how to get numbers."""
    if not any(root.children for root in prof.gf.graph.roots):
        return ("the profile holds no scopes or kernels: wrap regions of the program in "
                "proton.scope(...), or launch kernels on a GPU, while profiling")
    return ("the profile's frames hold no metrics: no kernel ran under them and none was timed; "
            "launch kernels on a GPU, or time regions with proton.cpu_timed_scope(...)")


def _nothing_matches(include, exclude, threshold, columns) -> str:
    """One line naming the filters that left no frame but ROOT."""
    given = [f"--include {include!r}" if include else "",
             f"--exclude {exclude!r}" if exclude else "",
             f"-t {threshold:g}" + (f" on {columns[0].header}" if columns else "")
             if threshold is not None else ""]
    return "no frame matches " + " ".join(g for g in given if g)


def _show_source(kernel: str, width: int | None, style: str, prof, roots) -> None:
    from rich.console import Console

    from .source import find_kernel
    from .source_view import source_view

    console = Console(width=width)
    # As the tree: fold code at the terminal's width or --width; piped, one line per line.
    fold_at = console.width if console.is_terminal or width else None
    console.print(source_view(find_kernel(prof, kernel, style), roots, width=fold_at,
                              style=style),
                  soft_wrap=fold_at is None, crop=False)


def _check_conflicts(opts: ViewOptions) -> None:
    """Options that cannot go together: say which."""
    output = opts.output
    if opts.list_metrics and (opts.metrics or opts.other or opts.print_sorted
                              or output != "tree"):
        raise ViewerError("-l lists the metrics only; drop -m/-diff/--print-sorted/--output, "
                          "or drop -l to show the tree")
    if output != "tree" and (opts.print_sorted or opts.width):
        raise ViewerError(f"--output {output} writes the rows for scripts; --print-sorted and "
                          "--width only apply to the tree view")


def _check_report_conflicts(opts: ViewOptions) -> None:
    """--diagnose writes text or JSON, --html a page: no other --output."""
    diagnose, html_path, output = opts.diagnose, opts.html_path, opts.output
    if diagnose and output not in ("tree", "json"):
        raise ViewerError(f"--diagnose writes its findings as text, or as JSON with --output "
                          f"json; --output {output} does not apply to it")
    if html_path is not None and output != "tree":
        raise ViewerError(f"--html writes a page; --output {output} does not apply to it: "
                          "drop one")
    if html_path is not None:
        _check_report_name(html_path)


def _check_profiles_given(ctx: click.Context, profiles, html_path: str | None) -> None:
    """Click's own error for a missing FILE; one that says what --html took when it took it."""
    if profiles:
        return
    if html_path is None:
        raise click.MissingParameter(ctx=ctx, param=next(
            p for p in ctx.command.params if p.name == "profiles"))
    raise ViewerError(f"no profile given: --html takes the page's name, then the profiles "
                      f"(--html REPORT.html FILE.hatchet), and took {html_path!r} as the page; "
                      f"e.g. --html report.html {html_path}")


def _check_report_name(path: str) -> None:
    """A report never replaces a profile: refuse a page's name that is a profile's, or a
    regular file there that is not a page (a profile under any name). Checked before any
    profile is read. A link or FIFO at the name is replaced (files.write_whole), never what
    it leads to."""
    import os
    import stat

    from ..files import STANDARD_STREAMS
    from .reader import MSGPACK_EXTENSION

    if os.path.normpath(path) in STANDARD_STREAMS:
        return
    fix = "give the page a name of its own, e.g. --html report.html FILE.hatchet"
    if path.endswith((TREE_EXTENSION, MSGPACK_EXTENSION, TRACE_EXTENSION)):
        raise ViewerError(f"--html {path!r} names a profile, not a page, and a report never "
                          f"replaces a profile; {fix}")
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            start = f.read(512)
    except OSError:
        return  # nothing readable there to lose; the write says why it fails, if it does
    if start.strip() and not start.lstrip().lower().startswith((b"<!doctype html", b"<html")):
        raise ViewerError(f"--html {path!r}: that file is not a page (a profile?), and a "
                          f"report replaces only a page; {fix}")


def _check_trace_conflicts(opts: ViewOptions) -> None:
    if _filters_given(opts) or opts.width or opts.rank is not None or opts.kernel:
        raise ViewerError("--output trace merges .chrome_trace files as they are; drop -l/-m/"
                          "-i/-e/-t/-diff/--print-sorted/--width/--rank/--source")


def _check_source_conflicts(opts: ViewOptions) -> None:
    if _filters_given(opts) or opts.output != "tree":
        raise ViewerError("--source shows one kernel's source lines; drop -l/-m/-i/-e/-t/"
                          "-diff/--print-sorted/--output, or drop --source to show the tree")


def _filters_given(opts: ViewOptions) -> bool:
    """-l, -m, -i, -e, -t, --print-sorted or -diff given: what only the tree views take."""
    return bool(opts.list_metrics or opts.metrics or opts.include or opts.exclude
                or opts.threshold is not None or opts.print_sorted or opts.other)


def main() -> None:
    """Console entry point; standard output that cannot be written is one line (status 1)."""
    from ..files import standard_output_failures

    try:
        with standard_output_failures():
            viewer.main(prog_name="proton-viewer")
    except SystemExit as done:
        _end(done.code)


def _end(code) -> None:
    """End the process with `code` (SystemExit's) once the exit handlers have run, without
    freeing what the view built object by object: the interpreter's teardown of a
    100,000-frame profile took 0.5 s of its 2.9, and 1.6 s of a -diff's 7.7."""
    import atexit
    import os
    import sys

    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # already written and flushed, or gone
            stream.flush()
    atexit._run_exitfuncs()  # what the interpreter runs at exit (demangle's worker)
    os._exit(code or 0)


if __name__ == "__main__":
    main()
