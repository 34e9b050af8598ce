"""docs/boards.md shows the catalogue as it is: its per-module tables are rendered from lightning_edge.catalog (the one
home of the facts) and must match it. After a change to the catalogue: ``python -m tests.catalog.test_boards_doc``
rewrites the rendered part of docs/boards.md (between the two markers), then review the diff."""

from __future__ import annotations

import sys
from pathlib import Path

from lightning_edge import catalog

DOC = Path(__file__).resolve().parents[2] / "docs" / "boards.md"
BEGIN = "<!-- rendered from lightning_edge.catalog by tests/catalog/test_boards_doc.py: do not edit by hand -->"
END = "<!-- end of the rendered part -->"


def _fmt(v: float) -> str:
    return f"{v:g}"


def render() -> str:
    """The summary table, one section per module and the numbered sources, in Markdown."""
    srcs: list[catalog.Source] = []

    def ref(src: catalog.Source) -> str:
        if src not in srcs:
            srcs.append(src)
        return f"[{srcs.index(src) + 1}]" + ("" if src.confirmed else "\u2020")

    out = ["| key | module | cores | CPU / GPU / EMC max (MHz) | grid | rated | mode space |",
           "|---|---|---|---|---|---|---|"]
    for key, b in catalog.BOARDS.items():
        sp = b.space()
        m = sp.max_mode()
        out.append(f"| `{key}` | {b.module} | {b.cpu_count} | {_fmt(m.cpu_mhz)} / {_fmt(m.gpu_mhz)} / "
                   f"{_fmt(m.mem_mhz)} | {sp.size:,} modes ({b.grid_firmware}) | {b.rated.watts:g} W | "
                   f"{'confirmed' if b.confirmed else '**unconfirmed**'} |")
    out.append("")
    for key, b in catalog.BOARDS.items():
        f, sp, r = b.facts(), b.space(), b.rails
        out += [f"### `{key}`: {b.name}", "",
                f"SoC {b.soc}; grid of the `{b.grid_firmware}` firmware: {' x '.join(map(str, sp.shape))} = "
                f"{sp.size:,} modes, highest `{sp.max_mode()}`.", "",
                "| fact | value | source |", "|---|---|---|"]
        clusters = ", ".join(f"cpu{c[0]}-{c[-1]}" if len(c) > 1 else f"cpu{c[0]}" for c in b.clusters) or "unknown"
        rows = [("cores", str(b.cpu_count), f["cores"]), ("CPU clusters", clusters, f["clusters"]),
                ("device tree", ", ".join(f"`nvidia,{c}`" for c in b.compatible), f["compatible"]),
                ("CPU MHz", ", ".join(_fmt(k / 1e3) for k in b.cpu.values), f["cpu"]),
                ("GPU MHz", ", ".join(_fmt(h / 1e6) for h in b.gpu.values), f["gpu"]),
                ("EMC MHz", ", ".join(_fmt(h / 1e6) for h in b.emc.values), f["emc"]),
                ("rails (INA3221)", ", ".join(r.names) + f"; input **{r.input or 'none'}**; total: "
                 f"{' + '.join(r.total) or 'not documented'}", f["rails"]),
                ("sysfs layout", f"family `{b.layout.family}` (see above)", f["layout"]),
                ("rated power", f"{b.rated.watts:g} W", f["max_power"])]
        out += [f"| {what} | {val} | {ref(src)} |" for what, val, src in rows]
        out += ["", "| firmware | ID | named mode | caps | grid mode under them | source |", "|---|---|---|---|---|---|"]
        for m in b.named_modes:
            mode = m.mode(sp)
            out.append(f"| {m.firmware} | {'' if m.id is None else m.id} | {m.name}{' (default)' if m.default else ''} "
                       f"| {m.caps()} | {'-' if mode is None else f'`{mode}`'} | {ref(m.source)} |")
        out.append("")
    out += ["### Sources", "", "\u2020 after a reference: that source does not confirm the fact.", ""]
    out += [f"{i}. {s.cite}{'' if s.confirmed else ' (unconfirmed)'}" for i, s in enumerate(srcs, 1)]
    return "\n".join(out) + "\n"


def _rendered_part(text: str) -> str:
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def test_the_doc_shows_the_catalogue_as_it_is():
    text = DOC.read_text()
    assert BEGIN in text and END in text
    assert _rendered_part(text) == render(), "docs/boards.md is stale: run python -m tests.catalog.test_boards_doc"


def test_the_doc_says_how_to_read_it_and_how_to_calibrate():
    text = DOC.read_text()
    for heading in ("## Confirmed, unconfirmed, derived", "## What is not known", "## Sysfs layout",
                    "## Extrapolated boards", "## Calibrating your board"):
        assert heading in text, heading
    cal = text.split("## Calibrating your board", 1)[1]
    for what in ("lightning-edge calibrate --device jetson --out", ".partial", "lightning_edge.board_file",
                 "`published`", "`extrapolated`", "`measured`", "`simulated`", "sim:my-nano.json"):
        assert what in cal, what


if __name__ == "__main__":  # rewrite the rendered part of docs/boards.md
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{BEGIN}\n{render()}{END}{tail}")
    print(f"rewrote {DOC}", file=sys.stderr)
