// Appended to a copy of report.html by test_report_views.py: zooms with wheel events on the memory
// view (about the long kernel's middle), then writes what the views show as JSON into the page.
(function(){
const panels=()=>[document.getElementById('timeline'),document.getElementById('memory'),...document.querySelectorAll('svg.allocations')];
const range=svg=>[+svg.getAttribute('data-t0'),+svg.getAttribute('data-t1')];
const ticks=svg=>[...svg.querySelectorAll('g.axis text.tick')].map(t=>[t.getAttribute('x'),t.textContent]);
const labels=()=>[...document.querySelectorAll('#timeline text.slice-label')].map(t=>{
  const rect=t.previousSibling;return {text:t.textContent,len:t.getComputedTextLength(),width:+rect.getAttribute('width')};});
// Each band: its details, and the height of its lower edge where it starts and where it ends.
const bands=()=>[...document.querySelectorAll('polygon.alloc')].map(p=>{const n=p.points.length;
  return [p.querySelector('title').textContent,p.points[0].y,p.points[n/2-1].y];});
const before=panels().map(range), labelsBefore=labels(), bandsBefore=bands();
const names=[...document.querySelectorAll('#timeline rect.slice')].map(s=>s.querySelector('title').textContent.split(' (')[0]);
const long=[...document.querySelectorAll('#timeline rect.slice')].find(s=>s.querySelector('title').textContent.startsWith('long_kernel'));
const lr=long.getBoundingClientRect(), mem=document.getElementById('memory'), r=mem.getBoundingClientRect();
for(let i=0;i<4;i++)mem.dispatchEvent(new WheelEvent('wheel',{deltaY:-100,clientX:lr.left+lr.width/2,clientY:r.top+40,bubbles:true,cancelable:true}));
const fills={};
for(const s of document.querySelectorAll('#timeline rect.slice')){const m=/\(([a-z_]+)[,)]/.exec(s.querySelector('title').textContent);
  (fills[m[1]]=fills[m[1]]||new Set()).add(s.getAttribute('fill'));}
const out={
  before:before, after:panels().map(range), ticks:panels().map(ticks), labelsBefore:labelsBefore, labels:labels(),
  names:names,
  key:[...document.querySelectorAll('#legend span')].map(s=>[s.getAttribute('data-kind'),getComputedStyle(s.querySelector('i')).backgroundColor]),
  fills:Object.fromEntries(Object.entries(fills).map(([k,v])=>[k,[...v]])),
  tracks:[...document.querySelectorAll('#timeline g.track')].map(g=>g.querySelector('text').textContent),
  bandsBefore:bandsBefore, bands:bands(),
  sites:[...document.querySelectorAll('svg.allocations text.site')].map(t=>t.textContent),
  title:document.title, h1:document.querySelector('h1').textContent};
const pre=document.createElement('pre');pre.id='probe';pre.textContent=JSON.stringify(out);document.body.appendChild(pre);
})();
