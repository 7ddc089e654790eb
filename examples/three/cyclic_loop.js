// Playing Cyclic Loop exports in three.js (r150+, WebGL2).
//
//   import { loadVat } from './cyclic_loop.js';
//   // glTF: the clip closes itself (its last key, at N / fps, repeats the first): play it as imported.
//   const gltf = await new GLTFLoader().loadAsync('loop.glb');
//   new THREE.AnimationMixer(gltf.scene).clipAction(gltf.animations[0]).play();
//   // VAT: the rest mesh and a material whose vertex shader reads the textures (EXR: full half-float precision).
//   const { mesh, setTime } = await loadVat(GLTFLoader, EXRLoader, 'flag_vat/Flag.json');
//   scene.add(mesh);  ...  setTime(seconds);   // every frame
//
// The VAT holds the N distinct samples of one period, t = j / fps (j = 0 .. N - 1), and lasts N / fps
// seconds; between t = (N - 1) / fps and N / fps the shader interpolates from the last sample back to the first.
import * as THREE from 'three';

/** GLSL (vertex stage) that reads a VAT: vatPosition() / vatNormal() are the object-space (Y up)
 * position and normal of the vertex at uv1 at frame vatFrame (a float, wrapping with period vatFrames). */
export const VAT_GLSL = /* glsl */ `
#ifndef USE_UV1
attribute vec2 uv1;
#endif
uniform sampler2D vatPositionMap;
uniform sampler2D vatNormalMap;
uniform vec3 vatPosMin, vatPosMax, vatNrmMin, vatNrmMax;
uniform float vatFrame, vatFrames, vatRowsPerFrame;
uniform vec2 vatSize;
vec3 vatFetch(sampler2D map, float frame, vec3 lo, vec3 hi) {
  // uv1 = texel centre of frame 0, v measured from the top row; the EXR's rows are stored bottom-up.
  float row = floor(uv1.y * vatSize.y) + frame * vatRowsPerFrame;
  ivec2 texel = ivec2(int(floor(uv1.x * vatSize.x)), int(vatSize.y - 1.0 - row));
  vec3 v = lo + texelFetch(map, texel, 0).rgb * (hi - lo);
  return vec3(v.x, v.z, -v.y);                    // Blender (Z up) -> glTF / three.js (Y up)
}
vec3 vatSample(sampler2D map, vec3 lo, vec3 hi) {
  float f = mod(vatFrame, vatFrames);
  float f0 = floor(f);
  return mix(vatFetch(map, f0, lo, hi), vatFetch(map, mod(f0 + 1.0, vatFrames), lo, hi), f - f0);
}
vec3 vatPosition(vec3 rest) { return rest + vatSample(vatPositionMap, vatPosMin, vatPosMax); }
vec3 vatNormal() { return normalize(vatSample(vatNormalMap, vatNrmMin, vatNrmMax)); }
`;

/** Uniforms of VAT_GLSL for the JSON ``info`` and the EXR textures (nearest texels, no mipmaps). */
export function vatUniforms(info, positionMap, normalMap) {
  for (const map of [positionMap, normalMap]) {
    map.magFilter = map.minFilter = THREE.NearestFilter;
    map.generateMipmaps = false;
    map.needsUpdate = true;
  }
  const range = (kind) => info.decode.exr[kind];
  return {
    vatPositionMap: { value: positionMap }, vatNormalMap: { value: normalMap },
    vatPosMin: { value: new THREE.Vector3(...range('pos').min) }, vatPosMax: { value: new THREE.Vector3(...range('pos').max) },
    vatNrmMin: { value: new THREE.Vector3(...range('nrm').min) }, vatNrmMax: { value: new THREE.Vector3(...range('nrm').max) },
    vatFrame: { value: 0 }, vatFrames: { value: info.frame_count }, vatRowsPerFrame: { value: info.rows_per_frame },
    vatSize: { value: new THREE.Vector2(...info.texture_size) },
  };
}

/** A MeshStandardMaterial whose vertices and normals come from the VAT. */
export function vatMaterial(uniforms, parameters = {}) {
  const material = new THREE.MeshStandardMaterial(parameters);
  material.onBeforeCompile = (shader) => {
    Object.assign(shader.uniforms, uniforms);
    shader.vertexShader = VAT_GLSL + shader.vertexShader
      .replace('#include <beginnormal_vertex>', 'vec3 objectNormal = vatNormal();')
      .replace('#include <begin_vertex>', 'vec3 transformed = vatPosition(position);');
  };
  return material;
}

/** Load a VAT export (its JSON, the EXR textures and the mesh): { mesh, uniforms, info, setTime(seconds) }. */
export async function loadVat(GLTFLoader, EXRLoader, jsonUrl, parameters = {}) {
  const info = await (await fetch(jsonUrl)).json();
  const base = new URL('.', new URL(jsonUrl, location.href)).href;
  const exr = new EXRLoader();
  const [positionMap, normalMap, gltf] = await Promise.all([
    exr.loadAsync(base + info.textures.pos.exr), exr.loadAsync(base + info.textures.nrm.exr),
    new GLTFLoader().loadAsync(base + info.mesh)]);
  const uniforms = vatUniforms(info, positionMap, normalMap);
  let mesh = null;
  gltf.scene.traverse((o) => { if (o.isMesh && !mesh) mesh = o; });
  mesh.material = vatMaterial(uniforms, parameters);
  mesh.frustumCulled = false;                      // the vertices move outside the rest mesh's bounds
  return { mesh, root: gltf.scene, uniforms, info, setTime: (t) => { uniforms.vatFrame.value = t * info.fps; } };
}
