"""The web preview page's HTML and script: two copies side by side, the forward cache played as a loop
(left) and the physical loop (right), linearly interpolated between samples and wrapping from the last
sample to the first. ``?frame=F`` holds frame F (a float); ``window.cyclicLoop`` lets tests drive it.
"""
import html
import re

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Cyclic Loop: __TITLE__</title>
<style>
  html, body { margin: 0; height: 100%; background: #20242b; color: #e6e6e6; font: 15px sans-serif; overflow: hidden; }
  canvas { display: block; }
  .label { position: absolute; transform: translate(-50%, -100%); white-space: nowrap; pointer-events: none; }
  #status { position: absolute; bottom: 10px; left: 12px; font-family: monospace; }
</style>
<script type="importmap">__IMPORTMAP__</script>
</head>
<body>
<div class="label" id="label-cache" style="color:#f0a050">forward cache, played as a loop</div>
<div class="label" id="label-loop" style="color:#60a8f0">physical loop</div>
<div id="status"></div>
<script id="loop-data" type="application/json">__DATA__</script>
<script type="module">
import * as THREE from 'three';

const data = JSON.parse(document.getElementById('loop-data').textContent);
const N = data.frames, n = data.vertices;
function decode(b64, Type) {
  const bin = atob(b64), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Type(bytes.buffer);
}
const clips = { cache: decode(data.cache, Float32Array), loop: decode(data.loop, Float32Array) };
const triangles = decode(data.triangles, Uint32Array);

const box = new THREE.Box3();
for (const clip of Object.values(clips)) {
  for (let i = 0; i < clip.length; i += 3) box.expandByPoint(new THREE.Vector3(clip[i], clip[i + 1], clip[i + 2]));
}
const size = box.getSize(new THREE.Vector3()), centre = box.getCenter(new THREE.Vector3());
// The copies stand side by side along the wider horizontal axis; the camera looks along the other one.
const alongX = size.x >= size.z;
const gap = Math.max(alongX ? size.x : size.z, 0.25 * size.y) * 1.3;

const renderer = new THREE.WebGLRenderer({ antialias: true, preserveDrawingBuffer: true });
renderer.setPixelRatio(window.devicePixelRatio);
document.body.appendChild(renderer.domElement);
const scene = new THREE.Scene();
scene.background = new THREE.Color(0x20242b);
scene.add(new THREE.HemisphereLight(0xffffff, 0x303040, 1.6));
const sun = new THREE.DirectionalLight(0xffffff, 2.0);
sun.position.set(1, 2, 3);
scene.add(sun);
const camera = new THREE.PerspectiveCamera(35, 1, 0.01, 1000);

const objects = {}, groups = {};
for (const [name, colour, side] of [['cache', 0xf0a050, -0.5], ['loop', 0x60a8f0, 0.5]]) {
  const geometry = new THREE.BufferGeometry();
  geometry.setAttribute('position', new THREE.BufferAttribute(clips[name].slice(0, 3 * n), 3));
  const group = new THREE.Group();
  if (triangles.length) {
    geometry.setIndex(new THREE.BufferAttribute(triangles, 1));
    group.add(new THREE.Mesh(geometry, new THREE.MeshStandardMaterial({ color: colour, side: THREE.DoubleSide, roughness: 0.7 })));
    group.add(new THREE.Mesh(geometry, new THREE.MeshBasicMaterial({ color: 0x101010, wireframe: true, transparent: true, opacity: 0.35 })));
  } else {
    group.add(new THREE.Points(geometry, new THREE.PointsMaterial({ color: colour, size: 10, sizeAttenuation: false })));
  }
  group.position.set((alongX ? side * gap : 0) - centre.x, -centre.y, (alongX ? 0 : -side * gap) - centre.z);
  scene.add(group);
  objects[name] = geometry;
  groups[name] = group;
}

function resize() {
  renderer.setSize(window.innerWidth, window.innerHeight);
  camera.aspect = window.innerWidth / window.innerHeight;
  const radius = 0.5 * Math.hypot(2 * gap, size.y);
  const distance = radius / Math.sin(THREE.MathUtils.degToRad(camera.fov) / 2) / Math.min(1, camera.aspect) * 0.65;
  const depth = distance + 0.5 * (alongX ? size.z : size.x);
  camera.position.set(alongX ? 0 : depth, 0.15 * distance, alongX ? depth : 0);
  camera.lookAt(0, 0, 0);
  camera.updateProjectionMatrix();
  camera.updateMatrixWorld();
  for (const [name, group] of Object.entries(groups)) {      // each label just above its copy
    const top = group.position.clone().add(centre).add(new THREE.Vector3(0, 0.6 * size.y, 0)).project(camera);
    const label = document.getElementById(`label-${name}`);
    label.style.left = `${(top.x + 1) / 2 * window.innerWidth}px`;
    label.style.top = `${(1 - top.y) / 2 * window.innerHeight}px`;
  }
}
window.addEventListener('resize', resize);
resize();

// Frame f in [0, N): samples floor(f) and floor(f) + 1 (mod N), linearly: the wrap N - 1 -> 0 is one step.
function show(f) {
  f = ((f % N) + N) % N;
  const j0 = Math.floor(f), j1 = (j0 + 1) % N, a = f - j0;
  for (const [name, geometry] of Object.entries(objects)) {
    const clip = clips[name], out = geometry.attributes.position.array;
    for (let i = 0; i < 3 * n; i++) out[i] = (1 - a) * clip[3 * n * j0 + i] + a * clip[3 * n * j1 + i];
    geometry.attributes.position.needsUpdate = true;
    if (geometry.index) geometry.computeVertexNormals();
  }
  const frame = data.frame_start + f * data.frame_step;
  document.getElementById('status').textContent = `${data.name}: frame ${frame.toFixed(1)} of ` +
    `${data.frame_start}..${data.frame_start + (N - 1) * data.frame_step} (${N} frames at ${data.fps} fps, wraps to ` +
    `${data.frame_start})`;
  renderer.render(scene, camera);
  return f;
}

const held = new URLSearchParams(location.search).get('frame');
const start = performance.now();
window.cyclicLoop = {
  frames: N, fps: data.fps, rendered: 0,
  show,
  positions: (name) => Array.from(objects[name].attributes.position.array),
};
function tick() {
  show(held !== null ? parseFloat(held) : (performance.now() - start) / 1000 * data.fps);
  window.cyclicLoop.rendered += 1;
  requestAnimationFrame(tick);
}
tick();
</script>
</body>
</html>
"""


def _script_json(text):
    """JSON text safe inside a <script> element: every "<" written as the JSON escape \\u003c (the same
    value), so no "</script>" or "<!--<script>" in a name can end or re-open the element."""
    return text.replace("<", "\\u003c")


def render(import_map, data_json, title=""):
    """The page with the import map and the loop's data filled in.

    Parameters
    ----------
    import_map, data_json : str
        JSON texts of the import map and of the loop's data.
    title : str
        The page title (HTML-escaped here).

    Returns
    -------
    str
        The page. The placeholders are filled in one pass, so a name holding "__DATA__" stays text.
    """
    values = {"__IMPORTMAP__": _script_json(import_map), "__TITLE__": html.escape(title),
              "__DATA__": _script_json(data_json)}
    return re.sub("|".join(values), lambda m: values[m.group(0)], PAGE)
