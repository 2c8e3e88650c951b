"""The HTML report: one self-contained file (no network) with the stream timeline, memory over
time, the summary tables and the diagnosis."""

from __future__ import annotations

import html
import json
from collections import defaultdict

from .data import ProfileData, us
from .analysis import diagnose
from .summary import headline, sections

MAX_SLICES = 200_000  # beyond this the timeline keeps the longest slices (the tables keep all)

_KINDS = ["kernel", "copy", "memset", "host_func", "event_record", "event_wait", "notify_record",
          "notify_wait", "host_func_nonblocking", "api", "range"]


def _timeline_data(profile: ProfileData) -> dict:
    names: dict[str, int] = {}
    tracks: list[dict] = []

    def name_id(n: str) -> int:
        return names.setdefault(n, len(names))

    per_thread: defaultdict[tuple, list[tuple]] = defaultdict(list)
    for c in profile.api_calls:
        per_thread[(c.thread, "api")].append((c.start_ns, c.end_ns, c.name, "api"))
    for r in profile.ranges:
        per_thread[(r.thread, "range")].append((r.start_ns, r.end_ns, r.name, "range"))
    for (th, what), items in sorted(per_thread.items()):
        label = f"{profile.threads.get(th, th)}" + (" ranges" if what == "range" else " API")
        tracks.append({"id": f"host-{th}-{what}", "group": "host", "label": label,
                       "items": items})
    info = profile.stream_info()
    per_stream: defaultdict[tuple, list[tuple]] = defaultdict(list)
    for t in profile.tasks:
        per_stream[(t.device, t.stream)].append((t.start_ns, t.end_ns, t.name, t.kind,
                                                 t.task_id))
    for (dev, sid), items in sorted(per_stream.items()):
        role = info.get((dev, sid))
        label = f"stream {sid}" + (f" ({role.role})" if role is not None and role.role else "")
        tracks.append({"id": f"d{dev}-s{sid}", "group": f"device {dev}", "label": label,
                       "items": items})
    total = sum(len(t["items"]) for t in tracks)
    cutoff = 0
    if total > MAX_SLICES:  # keep the longest slices: they are the ones that show at any zoom
        durations = sorted((it[1] - it[0] for t in tracks for it in t["items"]), reverse=True)
        cutoff = durations[MAX_SLICES - 1]
    out_tracks = []
    kind_index = {k: i for i, k in enumerate(_KINDS)}
    for t in tracks:
        rows = []
        for it in t["items"]:
            if it[1] - it[0] < cutoff:
                continue
            row = [us(it[0]), us(it[1] - it[0]), name_id(it[2]), kind_index.get(it[3], 0)]
            if len(it) > 4:
                row.append(it[4])
            rows.append(row)
        out_tracks.append({"id": t["id"], "group": t["group"], "label": t["label"], "s": rows})
    memory = defaultdict(list)
    for s in profile.memory:
        memory[str(s.device)].append([round(s.ts_ns / 1e3, 3), s.allocated, s.reserved])
    caps = {str(d.id): d.capacity for d in profile.devices}
    return {"duration_us": round(profile.duration_ns / 1e3, 3), "names": list(names),
            "kinds": _KINDS, "tracks": out_tracks, "memory": memory, "capacity": caps,
            "dropped": total - sum(len(t["s"]) for t in out_tracks)}


def _table_html(title: str, headers, rows) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in r) + "</tr>"
                   for r in rows)
    return (f"<section class='table'><h3>{html.escape(title)}</h3><table><thead><tr>{head}</tr>"
            f"</thead><tbody>{body}</tbody></table></section>")


def _findings_html(findings) -> str:
    if not findings:
        return "<p class='ok'>No problems found.</p>"
    parts = []
    for f in findings:
        ev = "".join(f"<li><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</li>"
                     for k, v in f.evidence.items())
        tasks = (f"<p class='tasks'>tasks (device/stream/task): "
                 f"{html.escape(', '.join(f.task_ids[:12]))}</p>" if f.task_ids else "")
        parts.append(f"<div class='finding' data-kind='{html.escape(f.kind)}'>"
                     f"<h3>{html.escape(f.title)}</h3><p><b>Cause.</b> {html.escape(f.cause)}</p>"
                     f"<ul>{ev}</ul>{tasks}<p><b>Try.</b> {html.escape(f.advice)}</p></div>")
    return "".join(parts)


def _races_html(profile: ProfileData) -> str:
    if not profile.races:
        return ""
    items = "".join(f"<li>{html.escape(r.text)}</li>" for r in profile.races)
    return f"<h2>Races ({len(profile.races)})</h2><ul class='races'>{items}</ul>"


def render_html(profile: ProfileData, findings=None, tables=None) -> str:
    """The report as one HTML document (inline CSS and JavaScript, data embedded as JSON);
    `tables`: sections(profile, findings), if made already."""
    if findings is None:
        findings = diagnose(profile)
    data = json.dumps(_timeline_data(profile), separators=(",", ":")).replace("</", "<\\/")
    tables = "".join(_table_html(*s) for s in (tables if tables is not None else sections(profile, findings)))
    title = "ascentrt profile" + (f": {' '.join(profile.command)}" if profile.command else "")
    return _TEMPLATE.format(title=html.escape(title), headline=html.escape(headline(profile)),
                            started=html.escape(profile.started_at), data=data,
                            findings=_findings_html(findings), count=len(findings),
                            races=_races_html(profile),
                            tables=tables, css=_CSS, js=_JS)


_CSS = """
body{font:13px system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px;margin:0 0 4px} h2{font-size:15px;margin:18px 0 6px} h3{font-size:13px;margin:6px 0}
.muted{color:#666} #errors{color:#b00;white-space:pre}
#timeline-wrap{border:1px solid #ccc;overflow:hidden;position:relative;cursor:grab}
#timeline text{font-size:11px;fill:#222} .label-bg{fill:#f4f4f4}
.group text{font-weight:bold}
.finding{border-left:4px solid #e15759;background:#fff6f5;padding:4px 10px;margin:8px 0}
.finding ul{margin:4px 0} .ok{color:#2a7}
table{border-collapse:collapse;margin:4px 0 10px} td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}
td:first-child,th:first-child{text-align:left} .tables{display:flex;flex-wrap:wrap;gap:0 24px}
.legend span{display:inline-block;margin-right:10px} .legend i{display:inline-block;width:10px;height:10px;margin-right:3px}
"""

_JS = r"""
(function(){
const D=JSON.parse(document.getElementById('profile-data').textContent);
const COLORS={kernel:'#4e79a7',copy:'#f28e2b',memset:'#76b7b2',host_func:'#59a14f',event_record:'#e15759',
 event_wait:'#edc948',notify_record:'#ff9da7',notify_wait:'#edc948',host_func_nonblocking:'#59a14f',api:'#9c755f',range:'#b07aa1'};
const NS='http://www.w3.org/2000/svg', LABEL=230, ROW=18;
function el(tag,attrs,parent){const e=document.createElementNS(NS,tag);for(const k in attrs)e.setAttribute(k,attrs[k]);if(parent)parent.appendChild(e);return e;}
const legend=document.getElementById('legend');
D.kinds.forEach(k=>{const s=document.createElement('span');s.innerHTML='<i style="background:'+COLORS[k]+'"></i>'+k;legend.appendChild(s);});
let view={t0:0,t1:Math.max(D.duration_us,1)};
const svg=document.getElementById('timeline');
function width(){return Math.max(600,document.getElementById('timeline-wrap').clientWidth);}
function draw(){
  while(svg.firstChild)svg.removeChild(svg.firstChild);
  const W=width(), plot=W-LABEL, scale=plot/(view.t1-view.t0);
  let y=20, group=null;
  el('rect',{x:0,y:0,width:W,height:16,class:'label-bg'},svg);
  for(let i=0;i<=8;i++){const t=view.t0+(view.t1-view.t0)*i/8;
    const tx=el('text',{x:LABEL+plot*i/8+2,y:12},svg);tx.textContent=(t/1000).toFixed(2)+' ms';
    el('line',{x1:LABEL+plot*i/8,x2:LABEL+plot*i/8,y1:0,y2:10000,stroke:'#eee'},svg);}
  for(const tr of D.tracks){
    if(tr.group!==group){group=tr.group;const g=el('g',{class:'group'},svg);
      const tx=el('text',{x:4,y:y+12},g);tx.textContent=group;y+=ROW;}
    const g=el('g',{class:'track','data-track':tr.id},svg);
    el('rect',{x:0,y:y,width:LABEL-4,height:ROW-2,class:'label-bg'},g);
    const tx=el('text',{x:12,y:y+12},g);tx.textContent=tr.label;
    let last=null;
    for(const s of tr.s){
      const a=s[0], b=s[0]+s[1];
      if(b<view.t0||a>view.t1)continue;
      let x=LABEL+(Math.max(a,view.t0)-view.t0)*scale, w=Math.max((Math.min(b,view.t1)-Math.max(a,view.t0))*scale,0.6);
      const kind=D.kinds[s[3]];
      if(last&&last.kind===kind&&x-(last.x+last.w)<0.5&&w<2){last.w=x+w-last.x;last.n+=1;last.r.setAttribute('width',last.w);continue;}
      const r=el('rect',{x:x,y:y+1,width:w,height:ROW-4,fill:COLORS[kind]||'#999',class:'slice'},g);
      const title=el('title',{},r);
      title.textContent=D.names[s[2]]+' ('+kind+(s.length>4?', task '+s[4]:'')+'): '+s[1].toFixed(1)+' us at '+(a/1000).toFixed(3)+' ms';
      last={x:x,w:w,kind:kind,r:r,n:1};
    }
    y+=ROW;
  }
  svg.setAttribute('width',W);svg.setAttribute('height',y+4);
}
const wrap=document.getElementById('timeline-wrap');
wrap.addEventListener('wheel',ev=>{ev.preventDefault();const W=width(),plot=W-LABEL;
  const f=Math.min(Math.max((ev.offsetX-LABEL)/plot,0),1),t=view.t0+f*(view.t1-view.t0);
  const k=ev.deltaY<0?0.8:1.25;let span=(view.t1-view.t0)*k;span=Math.min(Math.max(span,1),D.duration_us||1);
  view.t0=Math.max(0,t-f*span);view.t1=view.t0+span;draw();},{passive:false});
let drag=null;
wrap.addEventListener('mousedown',ev=>{drag={x:ev.clientX,t0:view.t0,t1:view.t1};});
window.addEventListener('mouseup',()=>{drag=null;});
window.addEventListener('mousemove',ev=>{if(!drag)return;const plot=width()-LABEL;
  const dt=(ev.clientX-drag.x)/plot*(drag.t1-drag.t0);view.t0=drag.t0-dt;view.t1=drag.t1-dt;draw();});
document.getElementById('reset-zoom').addEventListener('click',()=>{view={t0:0,t1:Math.max(D.duration_us,1)};draw();});
function drawMemory(){
  const svgm=document.getElementById('memory');const W=width(),H=160,P=40;
  let maxv=1,maxt=Math.max(D.duration_us,1);
  for(const d in D.memory)for(const p of D.memory[d])maxv=Math.max(maxv,p[1],p[2]);
  svgm.setAttribute('width',W);svgm.setAttribute('height',H+8+14*Object.keys(D.memory).length);
  el('line',{x1:P,x2:W,y1:H,y2:H,stroke:'#999'},svgm);
  const lab=el('text',{x:2,y:12},svgm);lab.textContent=(maxv/1048576).toFixed(1)+' MiB';
  const palette=['#4e79a7','#f28e2b','#59a14f','#e15759','#b07aa1'];let i=0;
  for(const d in D.memory){
    for(const [col,dash] of [[1,''],[2,'4 3']]){
      let pts='',prev=H;
      for(const p of D.memory[d]){const x=P+(W-P)*p[0]/maxt,y=H-(H-20)*p[col]/maxv;pts+=x+','+prev+' '+x+','+y+' ';prev=y;}
      pts+=W+','+prev;
      el('polyline',{points:pts,fill:'none',stroke:palette[i%5],'stroke-dasharray':dash,class:'memory-line','data-device':d},svgm);}
    const t=el('text',{x:P+10,y:H+16+i*14},svgm);
    t.textContent=(d==='-1'?'pinned host':'device '+d)+': allocated (solid), reserved (dashed)';i++;}
}
draw();drawMemory();
window.addEventListener('resize',draw);
document.body.setAttribute('data-rendered',String(document.querySelectorAll('g.track').length));
})();
"""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{css}</style></head>
<body>
<div id="errors"></div>
<script>window.addEventListener('error',function(e){{document.getElementById('errors').textContent+='script error: '+e.message+'\\n';}});</script>
<h1>{title}</h1>
<p class="muted">{headline}; started {started} UTC</p>
{races}<h2>Diagnosis ({count})</h2>
{findings}
<h2>Timeline</h2>
<p class="muted">Wheel to zoom, drag to pan. <button id="reset-zoom">reset zoom</button></p>
<div class="legend" id="legend"></div>
<div id="timeline-wrap"><svg id="timeline" xmlns="http://www.w3.org/2000/svg"></svg></div>
<h2>Memory over time</h2>
<svg id="memory" xmlns="http://www.w3.org/2000/svg"></svg>
<h2>Summary</h2>
<div class="tables">{tables}</div>
<script type="application/json" id="profile-data">{data}</script>
<script>{js}</script>
</body></html>
"""
