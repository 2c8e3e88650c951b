// The report's views: the timeline, memory over time and the allocations, drawn from the
// embedded data over one shared time range (wheel or drag on any of them moves all).
(function(){
const D=JSON.parse(document.getElementById('profile-data').textContent);
const NS='http://www.w3.org/2000/svg', LABEL=230, ROW=18, AXIS=18, MIN_LABEL=24;
const FULL={t0:0,t1:Math.max(D.duration_us,1)};
const SITE_COLORS=['#4e79a7','#f28e2b','#e15759','#76b7b2','#59a14f','#edc948','#b07aa1','#ff9da7','#9c755f','#86bcb6'];
const DEVICE_COLORS=['#4e79a7','#f28e2b','#59a14f','#e15759','#b07aa1'];
let view={t0:FULL.t0,t1:FULL.t1};

function el(tag,attrs,parent){const e=document.createElementNS(NS,tag);for(const k in attrs)e.setAttribute(k,attrs[k]);if(parent)parent.appendChild(e);return e;}
function text(parent,x,y,s,cls,fill){const t=el('text',{x:x,y:y},parent);if(cls)t.setAttribute('class',cls);if(fill)t.setAttribute('fill',fill);t.textContent=s;return t;}
function clear(svg){while(svg.firstChild)svg.removeChild(svg.firstChild);}
function width(){return Math.max(600,document.getElementById('views').clientWidth);}
function xOf(t,W){return LABEL+(t-view.t0)*(W-LABEL)/(view.t1-view.t0);}
function clampT(t){return Math.min(Math.max(t,view.t0),view.t1);}
function bytes(n){const u=['B','KiB','MiB','GiB','TiB'];let i=0;while(n>=1024&&i<u.length-1){n/=1024;i++;}return (i?n.toFixed(1):String(n))+' '+u[i];}
function ms(us){return (us/1000).toFixed(3)+' ms';}
function ink(hex){const v=parseInt(hex.slice(1),16),r=v>>16,g=(v>>8)&255,b=v&255;return 0.299*r+0.587*g+0.114*b<150?'#fff':'#222';}
// Text widths from a canvas in the views' font, a character at a time (no layout per label).
const measure=document.createElement('canvas').getContext('2d'), charWidth={};
measure.font='11px '+getComputedStyle(document.body).fontFamily;
function textWidth(s){let w=0;for(const c of s)w+=charWidth[c]||(charWidth[c]=measure.measureText(c).width);return w;}
function fitLabel(s,room){if(textWidth(s)<=room)return s;
  let n=s.length-1;while(n>0&&textWidth(s.slice(0,n)+'\u2026')>room)n--;return n>1?s.slice(0,n)+'\u2026':'';}
function lowerBound(rows,t){let lo=0,hi=rows.length;while(lo<hi){const m=(lo+hi)>>1;if(rows[m][0]<t)lo=m+1;else hi=m;}return lo;}

// The time axis every view draws the same way: ticks over the shared range, units that fit it.
function axis(svg,W,height){
  const span=view.t1-view.t0, unit=span>=2e6?[1e6,'s']:span>=2e3?[1e3,'ms']:[1,'us'];
  const dec=Math.min(6,Math.max(0,Math.ceil(-Math.log10(span/8/unit[0]))+1));
  el('rect',{x:0,y:0,width:W,height:AXIS-2,class:'label-bg'},svg);
  const g=el('g',{class:'axis'},svg);
  for(let i=0;i<=8;i++){const x=LABEL+(W-LABEL)*i/8,t=view.t0+span*i/8;
    el('line',{x1:x,x2:x,y1:0,y2:height,stroke:'#eee'},g);
    if(i<8)text(g,x+2,12,(t/unit[0]).toFixed(dec)+' '+unit[1],'tick');}
  svg.setAttribute('data-t0',view.t0);svg.setAttribute('data-t1',view.t1);
}

// ---- the key: the kinds this profile has, each in its own colour ----
const used=new Set();
for(const tr of D.tracks)for(const s of tr.s)used.add(s[3]);
const legend=document.getElementById('legend');
D.kinds.forEach((k,i)=>{if(!used.has(i))return;const s=document.createElement('span');s.setAttribute('data-kind',k);
  s.innerHTML='<i style="background:'+D.colors[i]+'"></i>'+k;legend.appendChild(s);});
const fates=new Set();  // (and the outlines of the tasks that did not run to their end)
for(const tr of D.tracks)for(const s of tr.s)if(s.length>5)fates.add(s[5]);
D.fates.forEach((f,i)=>{if(!fates.has(i))return;const s=document.createElement('span');s.setAttribute('data-fate',f);
  s.innerHTML='<svg width="12" height="10"><rect x="1" y="1" width="10" height="8" fill="#ccc" class="slice fate-'+f+'"></rect></svg>'+f;legend.appendChild(s);});

// ---- the timeline: one row per host thread and stream; slices labelled where they fit ----
function drawTimeline(W){
  const svg=document.getElementById('timeline');clear(svg);
  const scale=(W-LABEL)/(view.t1-view.t0);
  const body=el('g',{},svg);
  let y=AXIS+2, group=null;
  for(const tr of D.tracks){
    if(tr.group!==group){group=tr.group;text(el('g',{class:'group'},body),4,y+12,group);y+=ROW;}
    const g=el('g',{class:'track','data-track':tr.id},body);
    el('rect',{x:0,y:y,width:LABEL-4,height:ROW-2,class:'label-bg'},g);
    text(g,12,y+12,tr.label);
    let last=null;
    for(const s of tr.s){
      const a=s[0], b=s[0]+s[1];
      if(b<view.t0||a>view.t1)continue;
      const x=LABEL+(Math.max(a,view.t0)-view.t0)*scale, w=Math.max((Math.min(b,view.t1)-Math.max(a,view.t0))*scale,0.6);
      const kind=s[3], fate=s.length>5?D.fates[s[5]]:'';
      // Runs of sub-pixel slices of one kind become one rect: the DOM stays bounded by the width.
      if(!fate&&last&&last.small&&last.kind===kind&&x-(last.x+last.w)<0.5&&w<2){last.w=x+w-last.x;last.r.setAttribute('width',last.w);continue;}
      const color=D.colors[kind]||'#999';
      // A task that failed, was dropped unrun or never finished is outlined (see the key).
      const r=el('rect',{x:x,y:y+1,width:w,height:ROW-4,fill:color,class:fate?'slice fate-'+fate:'slice'},g);
      const name=D.names[s[2]];
      const what=fate?' \u2014 '+fate+(s[6]>=0?': '+D.names[s[6]]:''):'';
      el('title',{},r).textContent=name+' ('+D.kinds[kind]+(s.length>4?(tr.sites?', at '+D.names[s[4]]:', task '+s[4]):'')+'): '+s[1].toFixed(1)+' us at '+ms(a)+what;
      last=fate?null:{x:x,w:w,kind:kind,r:r,small:w<2};
      const label=w>=MIN_LABEL?fitLabel(name,w-5):'';
      if(label)text(g,x+2,y+12,label,'slice-label',ink(color));
    }
    y+=ROW;
  }
  axis(svg,W,y);svg.appendChild(body);  // the axis' grid lines go under the slices
  svg.setAttribute('width',W);svg.setAttribute('height',y+4);
}

// ---- memory over time: allocated (solid) and reserved (dashed) per device ----
// The vertices [x0,v0,x1,v1,...] of a step function over [ta, tb] (within the view): rows are
// [t, ...] sorted by t, the value in rows[k][col] from rows[k][0] on, v before the first. A pixel
// column keeps at most its last value, and with `spikes` its lowest and highest too (a short
// spike still shows): a long series costs the width, not its length.
function stepVertices(rows,col,v,W,ta,tb,spikes){
  let k=lowerBound(rows,ta);if(k>0)v=rows[k-1][col];
  const out=[xOf(ta,W),v];let cx=NaN,lo=0,hi=0;
  const flush=()=>{if(cx===cx){if(spikes)out.push(cx,lo,cx,hi);out.push(cx,v);}};
  for(;k<rows.length&&rows[k][0]<=tb;k++){const x=Math.round(xOf(rows[k][0],W)), nv=rows[k][col];
    if(x!==cx){flush();out.push(x,v);cx=x;lo=hi=nv;}else{lo=Math.min(lo,nv);hi=Math.max(hi,nv);}
    v=nv;}
  flush();out.push(xOf(tb,W),v);return out;
}
function points(vs,yOf,shift){const out=[];for(let i=0;i<vs.length;i+=2)out.push(Math.round(vs[i]*10)/10+','+Math.round(yOf(vs[i+1]+shift)*10)/10);return out;}
function stepPoints(rows,col,yOf,W){return points(stepVertices(rows,col,0,W,view.t0,view.t1,true),yOf,0).join(' ');}
function drawMemory(W){
  const svg=document.getElementById('memory');clear(svg);
  const devices=Object.keys(D.memory), H=Math.max(160,AXIS+50+16*devices.length);
  axis(svg,W,H);
  let maxv=0;
  for(const d of devices)for(const p of D.memory[d])maxv=Math.max(maxv,p[1],p[2]);
  const yOf=v=>H-(H-AXIS-8)*v/Math.max(maxv,1);
  el('line',{x1:LABEL,x2:W,y1:H,y2:H,stroke:'#999'},svg);
  text(svg,4,AXIS+12,'peak '+bytes(maxv),'muted');
  text(svg,4,AXIS+26,'solid: allocated, dashed: reserved','muted');
  devices.forEach((d,i)=>{const color=DEVICE_COLORS[i%DEVICE_COLORS.length];
    for(const [col,dash] of [[1,''],[2,'4 3']])
      el('polyline',{points:stepPoints(D.memory[d],col,yOf,W),fill:'none',stroke:color,'stroke-dasharray':dash,class:'memory-line','data-device':d},svg);
    el('rect',{x:4,y:AXIS+34+16*i,width:10,height:10,fill:color},svg);
    text(svg,18,AXIS+43+16*i,d==='-1'?'pinned host':'device '+d);});
  svg.setAttribute('width',W);svg.setAttribute('height',H+4);
}

// ---- allocations: each buffer a band stacked in allocation order (a free lets the ones above
// it drop), coloured by call site, over the area of all allocated bytes ----
function stack(rows){
  const events=[];
  rows.forEach((r,i)=>{events.push([r[0],1,i]);events.push([r[1]===null?FULL.t1:r[1],0,i]);});
  events.sort((a,b)=>a[0]-b[0]||a[1]-b[1]);  // a free before an allocation at the same time
  const live=[], off=new Array(rows.length), path=rows.map(()=>[]);
  let top=0, peak=0;
  for(const [t,alloc,i] of events){
    if(alloc){off[i]=top;path[i].push([t,top]);live.push(i);top+=rows[i][2];peak=Math.max(peak,top);continue;}
    const p=live.indexOf(i);live.splice(p,1);top-=rows[i][2];
    for(let j=p;j<live.length;j++){const k=live[j];off[k]-=rows[i][2];path[k].push([t,off[k]]);}
  }
  return {path:path,peak:peak};
}
const ALLOC=[], allocHost=document.getElementById('allocations');
if(!Object.keys(D.allocations).length)allocHost.textContent='No allocations while profiling.';
for(const d in D.allocations){const a=D.allocations[d];const s=stack(a.rows);
  const bySite={};for(const r of a.rows)bySite[r[3]]=(bySite[r[3]]||0)+r[2];
  const sites=Object.keys(bySite).map(Number).sort((x,y)=>bySite[y]-bySite[x]);
  const color={};sites.forEach((site,i)=>{color[site]=SITE_COLORS[i%SITE_COLORS.length];});
  const svg=el('svg',{class:'allocations','data-device':d},allocHost);
  svg.addEventListener('click',ev=>{const i=ev.target.getAttribute('data-index');if(i===null)return;
    const site=ev.target.getAttribute('data-site');
    document.getElementById('alloc-detail').textContent=describe(d,a.rows[+i]);
    for(const b of allocHost.querySelectorAll('polygon.alloc'))b.classList.toggle('same-site',b.getAttribute('data-site')===site);});
  ALLOC.push({svg:svg,device:d,rows:a.rows,hidden:a.hidden,path:s.path,peak:s.peak,sites:sites,bySite:bySite,color:color});}
function describe(dev,r){
  const end=r[1]===null?'still allocated at the end':'freed at '+ms(r[1])+' (lived '+ms(r[1]-r[0])+')';
  return bytes(r[2])+' at 0x'+r[4].toString(16)+' on '+(dev==='-1'?'pinned host':'device '+dev)+', allocated at '+ms(r[0])+' by '+D.names[r[3]]+', '+end;
}
function drawAllocations(W){
  const H=200;
  for(const A of ALLOC){
    const svg=A.svg;clear(svg);svg.setAttribute('width',W);svg.setAttribute('height',H+4);
    axis(svg,W,H);
    let maxv=Math.max(1,A.peak);const mem=D.memory[A.device]||[];
    for(const p of mem)maxv=Math.max(maxv,p[1]);
    const yOf=v=>H-(H-AXIS-8)*v/maxv;
    if(mem.length){const pts=stepPoints(mem,1,yOf,W);  // all allocated bytes, behind the bands
      el('polygon',{points:LABEL+','+H+' '+pts+' '+W+','+H,class:'allocated-area'},svg);}
    const pixel=maxv/(H-AXIS-8), minBytes=pixel/5;  // thinner than a fifth of a pixel: left to the grey area
    A.rows.forEach((r,i)=>{
      const end=r[1]===null?FULL.t1:r[1];
      if(end<view.t0||r[0]>view.t1||r[2]<minBytes)return;
      const edge=stepVertices(A.path[i],1,A.path[i][0][1],W,clampT(r[0]),clampT(end),false);  // its lower edge
      const band=el('polygon',{points:points(edge,yOf,0).concat(points(edge,yOf,r[2]).reverse()).join(' '),
        fill:A.color[r[3]],class:r[2]>=4*pixel?'alloc outlined':'alloc','data-index':i,'data-site':D.names[r[3]]},svg);
      el('title',{},band).textContent=describe(A.device,r);});
    text(svg,4,AXIS+12,(A.device==='-1'?'pinned host':'device '+A.device)+', peak '+bytes(maxv),'group-label');
    const lines=Math.floor((H-AXIS-40)/14);
    A.sites.slice(0,lines).forEach((site,i)=>{el('rect',{x:4,y:AXIS+22+14*i,width:10,height:10,fill:A.color[site]},svg);
      text(svg,18,AXIS+31+14*i,D.names[site]+'  '+bytes(A.bySite[site]),'site');});
    if(A.hidden)text(svg,4,H-4,A.hidden+' smaller ones only in the grey area','muted');
    el('line',{x1:LABEL,x2:W,y1:H,y2:H,stroke:'#999'},svg);
  }
}

// ---- one shared time range ----
function drawAll(){const W=width();drawTimeline(W);drawMemory(W);drawAllocations(W);}  // one width: one x scale
function zoomAt(f,factor){
  const t=view.t0+f*(view.t1-view.t0);
  const span=Math.min(Math.max((view.t1-view.t0)*factor,0.001),FULL.t1);
  view.t0=Math.min(Math.max(0,t-f*span),FULL.t1-span);view.t1=view.t0+span;drawAll();
}
const views=document.getElementById('views');
function fraction(ev){const r=views.getBoundingClientRect();return Math.min(Math.max((ev.clientX-r.left-LABEL)/(r.width-LABEL),0),1);}
views.addEventListener('wheel',ev=>{ev.preventDefault();zoomAt(fraction(ev),ev.deltaY<0?0.8:1.25);},{passive:false});
let drag=null;
views.addEventListener('mousedown',ev=>{drag={x:ev.clientX,t0:view.t0,t1:view.t1};});
window.addEventListener('mouseup',()=>{drag=null;});
window.addEventListener('mousemove',ev=>{if(!drag)return;const span=drag.t1-drag.t0;
  const dt=(ev.clientX-drag.x)/(width()-LABEL)*span;view.t0=drag.t0-dt;view.t1=drag.t1-dt;drawAll();});
document.getElementById('reset-zoom').addEventListener('click',()=>{view={t0:FULL.t0,t1:FULL.t1};drawAll();});
window.addEventListener('resize',drawAll);
drawAll();
document.body.setAttribute('data-rendered',String(document.querySelectorAll('g.track').length));
})();
