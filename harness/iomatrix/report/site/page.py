"""A report page: one self-contained HTML file (its style and its small script inline), so any
page opens on its own, from file://, from a CI artifact or from GitHub Pages, with nothing
fetched. The script only sorts and filters tables (and the chart marks that belong to their
rows); every chart is already drawn (svg.py)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape

from iomatrix import __version__
from iomatrix.model.numbers import fixed, significant
from iomatrix.report.reproduce_line import Reproduce

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:10px 20px}
header a{color:#b3e5fc;margin-right:14px;text-decoration:none}
header h1{font-size:18px;margin:4px 0 6px}
main{padding:10px 20px 40px;max-width:1200px;box-sizing:border-box}
.table-box{max-width:100%;overflow-x:auto}
details{margin:6px 0}summary{cursor:pointer;font-weight:600;font-size:13px}
h2{font-size:16px;margin:26px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:14px;margin:18px 0 6px}
table{border-collapse:collapse;font-size:12px;background:#fff;margin:6px 0}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#eceff1;position:sticky;top:0}
table.sortable th{cursor:pointer}
table.sortable th.sorted-asc::after{content:" \\25B2"}
table.sortable th.sorted-desc::after{content:" \\25BC"}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.verdict-regressed{color:#c62828;font-weight:600}
.verdict-improved{color:#2e7d32;font-weight:600}
.verdict-noisy{color:#ef6c00}
.forced{background:#fff3e0;border:1px solid #ef6c00;padding:6px 10px}
.note{color:#555;font-size:12px}
.filters{margin:8px 0;font-size:12px}
.filters label{margin-right:12px}
figure{margin:10px 0}figcaption{font-size:12px;font-weight:600;margin:2px 0}
svg.chart{background:#fff;border:1px solid #e0e0e0;margin:4px 0;max-width:100%;height:auto}
.hidden{display:none}
code{font-size:11px}
td.reason{max-width:640px;overflow-wrap:anywhere}
td.drive{min-width:280px}
td.drive code{overflow-wrap:anywhere}
"""

# Sorting: click a header (numbers by data-sort or their text); filtering: every <select
# data-filter=KEY> and <input data-filter-text> in a .filters box hides the .filterable elements
# of the page whose data-KEY differs, table rows and chart marks alike.
SCRIPT = """
(function(){
function key(td){var v=td.getAttribute('data-sort');if(v===null)v=td.textContent.trim();
 var n=parseFloat(v.replace(/,/g,''));return isNaN(n)?v.toLowerCase():n;}
document.querySelectorAll('table.sortable').forEach(function(table){
 table.querySelectorAll('th').forEach(function(th,col){th.addEventListener('click',function(){
  var body=table.tBodies[0];var rows=Array.prototype.slice.call(body.rows);
  var asc=!th.classList.contains('sorted-asc');
  table.querySelectorAll('th').forEach(function(h){h.classList.remove('sorted-asc','sorted-desc')});
  th.classList.add(asc?'sorted-asc':'sorted-desc');
  rows.sort(function(a,b){var x=key(a.cells[col]),y=key(b.cells[col]);
   if(typeof x!==typeof y){x=String(x);y=String(y);}return (x<y?-1:x>y?1:0)*(asc?1:-1);});
  rows.forEach(function(r){body.appendChild(r)});});});});
function apply(){
 var sel={};document.querySelectorAll('.filters select[data-filter]').forEach(function(s){
  if(s.value)sel[s.getAttribute('data-filter')]=s.value;});
 var text='';var box=document.querySelector('.filters input[data-filter-text]');
 if(box)text=box.value.toLowerCase();
 var shown=0,total=0;
 document.querySelectorAll('.filterable').forEach(function(el){
  var ok=true;for(var k in sel){if(el.getAttribute('data-'+k)!==sel[k])ok=false;}
  if(ok&&text&&el.tagName==='TR'&&el.textContent.toLowerCase().indexOf(text)<0)ok=false;
  el.classList.toggle('hidden',!ok);
  if(el.tagName==='TR'||el.tagName==='DIV'){total++;if(ok)shown++;}});
 var count=document.getElementById('shown-count');
 if(count)count.textContent=shown+' of '+total+' shown';
 document.querySelectorAll('svg[data-row-height]').forEach(restack);}
function restack(svg){
 var h=parseFloat(svg.getAttribute('data-row-height')),top=parseFloat(svg.getAttribute('data-top'));
 var rows=svg.querySelectorAll('g.forest-row'),k=0;
 rows.forEach(function(g,i){if(!g.classList.contains('hidden')){
  g.setAttribute('transform','translate(0,'+((k-i)*h)+')');k++;}});
 svg.querySelector('g.axis').setAttribute('transform','translate(0,'+((k-rows.length)*h)+')');
 var w=parseFloat(svg.getAttribute('width')),height=top+h*k+30;
 svg.setAttribute('height',height);svg.setAttribute('viewBox','0 0 '+w+' '+height);}
document.querySelectorAll('.filters select,.filters input').forEach(function(el){
 el.addEventListener('input',apply);el.addEventListener('change',apply);});
apply();
})();
"""


@dataclass(frozen=True)
class NavLink:
    title: str
    href: str


def e(text: object) -> str:
    return escape(str(text))


def render_page(title: str, body: str, nav: Sequence[NavLink] = (), subtitle: str = "") -> str:
    links = "".join(f'<a href="{e(link.href)}">{e(link.title)}</a>' for link in nav)
    sub = f'<div class="note" style="color:#cfd8dc">{e(subtitle)}</div>' if subtitle else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{STYLE}</style></head><body>"
        f"<header><nav>{links}</nav><h1>{e(title)}</h1>{sub}</header>"
        f"<main>{body}</main>"
        f'<footer class="note" style="padding:0 20px 20px">iomatrix {e(__version__)}</footer>'
        f"<script>{SCRIPT}</script></body></html>\n"
    )


@dataclass(frozen=True)
class Cell:
    """A table cell: its text (escaped here) or ready HTML, a sort key, numeric alignment."""

    text: str = ""
    html: str | None = None
    sort: str | None = None
    numeric: bool = False
    css: str = ""


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    sortable: bool = True,
    row_attributes: Sequence[Sequence[tuple[str, str]]] | None = None,
    css_id: str = "",
) -> str:
    """An HTML table in its own scrolling box (a wide table scrolls inside it, never the page);
    rows with attributes become .filterable (the page's filters apply)."""
    id_attr = f' id="{e(css_id)}"' if css_id else ""
    class_attr = ' class="sortable"' if sortable else ""
    out = [
        f'<div class="table-box"><table{id_attr}{class_attr}><thead><tr>'
        + "".join(f"<th>{e(h)}</th>" for h in header)
        + "</tr></thead><tbody>"
    ]
    for index, row in enumerate(rows):
        attrs = row_attributes[index] if row_attributes is not None else ()
        tr_attrs = "".join(f' data-{k}="{e(v)}"' for k, v in attrs)
        out.append(f'<tr class="filterable"{tr_attrs}>' if attrs else "<tr>")
        for item in row:
            cell = item if isinstance(item, Cell) else Cell(text=str(item))
            classes = " ".join(c for c in ("num" if cell.numeric else "", cell.css) if c)
            attrs_html = f' class="{classes}"' if classes else ""
            if cell.sort is not None:
                attrs_html += f' data-sort="{e(cell.sort)}"'
            content = cell.html if cell.html is not None else e(cell.text)
            out.append(f"<td{attrs_html}>{content}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def filters(choices: Sequence[tuple[str, str, Sequence[str]]], *, text: bool = True) -> str:
    """A filter box: (data key, label, values) selects, and a free-text filter of table rows."""
    parts = ['<div class="filters">']
    for key, label, values in choices:
        options = "".join(f'<option value="{e(v)}">{e(v)}</option>' for v in values)
        parts.append(
            f'<label>{e(label)} <select data-filter="{e(key)}"><option value="">all</option>'
            f"{options}</select></label>"
        )
    if text:
        parts.append('<label>text <input data-filter-text type="search" size="24"></label>')
    parts.append('<span id="shown-count" class="note"></span></div>')
    return "".join(parts)


def number_cell(value: float | None, *, digits: int | None = None, suffix: str = "") -> Cell:
    if value is None:
        return Cell(text="-", sort="", numeric=True)
    text = fixed(value, digits) if digits is not None else significant(value)
    return Cell(text=text + suffix, sort=repr(value), numeric=True)


def change_cell(ratio: float | None, base: float | None, new: float | None) -> Cell:
    """A change (ratio new/base) with the two medians it is of: "-2.0% (1,234 -> 1,209)",
    sorted by the change."""
    if ratio is None:
        return number_cell(None)
    medians = "" if base is None or new is None else f" ({significant(base)} → {significant(new)})"
    return Cell(text=f"{ratio - 1:+.1%}{medians}", sort=repr(ratio - 1), numeric=True)


def percent_cell(value: float | None) -> Cell:
    if value is None:
        return Cell(text="-", sort="", numeric=True)
    return Cell(text=f"{value:+.1%}", sort=repr(value), numeric=True)


def figure(caption: str, chart: str) -> str:
    """A chart with its title above it (the SVG's own label is for screen readers)."""
    return f"<figure><figcaption>{e(caption)}</figcaption>{chart}</figure>"


def link(href: str, text: str) -> str:
    return f'<a href="{e(href)}">{e(text)}</a>'


def reproduce_block(found: Reproduce | None) -> str:
    """The commands that measure a page's result again from a bare machine (the pipx line of
    the iomatrix that made it, then `iomatrix reproduce ID`), or "" without an id to give."""
    if found is None:
        return ""
    lines = "\n".join(found.lines())
    return (
        '<p class="note">Measure it again from a bare machine (<code>iomatrix reproduce</code> '
        "prints every step, <code>--run</code> does them):</p>"
        f'<pre class="reproduce">{e(lines)}</pre>'
    )
