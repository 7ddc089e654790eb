// SPDX-License-Identifier: GPL-3.0-or-later
// Flamenco 3 job type "Cyclic Loop Bake": put this file in the `scripts` folder next to
// flamenco-manager. One task per object, each one run of cyclic_loop_addon/bake.py in Blender on a
// worker, writing <output_dir>/<scene>-<object>-<variant>.<ext> and its JSON report (the names farm.py
// gives the same task). bake.py exits 0 (done), 2 (bad input: fix the settings, do not retry) or 3 (the
// solver failed: try other settings); a failed task leaves none of its outputs, and a task whose report
// is newer than its outputs is skipped (unless "force").
//
// Objects are a JSON list, each string one object by its exact name (commas, "+" and spaces are part of
// the name) and each inner list one N-body group: ["Flag", "Banner 2", ["Sun", "Planet"]]. Each name is
// passed as one "--object=NAME" argument, so no name is split or read as an option. A text that is not a
// JSON list is read the older way: comma-separated names, "+" joining N bodies.

const OUTPUT_EXTENSIONS = { blend: ".blend", abc: ".abc", pc2: ".pc2", preview: ".png" };
const OUTPUT_OPTIONS = { blend: "--output", abc: "--abc", pc2: "--pc2", preview: "--preview" };
const LOOP = "C.object.cyclic_loop_settings";
const MODEL_DEFAULT = { init: "auto", substeps: -1 };  // values that leave bake.py the model's default

const JOB_TYPE = {
    label: "Cyclic Loop Bake",
    description: "Physical loops of simulated meshes (Cyclic Loop add-on), one bake.py task per object",
    settings: [
        { key: "objects", type: "string", required: true,
          eval: "__import__('json').dumps([o.name for o in C.selected_objects if o.type == 'MESH'])",
          evalInfo: { showLinkButton: true, description: "Selected meshes" },
          description: "Objects to loop, one task each, as a JSON list of names; a list inside it is one "
                       + "N-body group: [\"Flag\", [\"Sun\", \"Planet\"]]" },
        { key: "frames", type: "string", required: true,
          eval: `f'{${LOOP}.frame_start}-{${LOOP}.frame_end}'`,
          evalInfo: { showLinkButton: true, description: "The active object's loop frames" },
          description: "Loop frames, first-last (for example 49-72)" },
        { key: "variant", type: "string", default: "default",
          description: "Name of these settings, part of every output file name" },
        { key: "model", type: "string", default: "auto", eval: `${LOOP}.model`,
          choices: ["auto", "blender_cloth", "shell", "soft_body", "nbody"] },
        { key: "init", type: "string", default: "auto", eval: `${LOOP}.init`,
          choices: ["auto", "fast_projection", "forward", "crossfade", "cache", "cache_or_forward"],
          description: "Initial guess (auto: the model's default, cache_or_forward for Blender cloth)" },
        { key: "scheme", type: "string", default: "auto", eval: `${LOOP}.scheme`,
          choices: ["auto", "linearized", "backward", "symplectic"] },
        { key: "substeps", type: "int32", default: -1, propargs: { min: -1, max: 64 }, eval: `${LOOP}.substeps`,
          description: "Solver steps per frame (-1: the model's default, one per frame for Blender cloth; "
                       + "0: from the physics settings)" },
        { key: "iterations", type: "int32", default: 50, propargs: { min: 1, max: 10000 }, eval: `${LOOP}.max_iters`,
          description: "Maximum Gauss-Newton iterations" },
        { key: "outputs", type: "string", default: "blend,pc2",
          description: "Files every task writes, comma-separated: blend, abc, pc2, preview" },
        { key: "bake", type: "bool", default: true,
          description: "Bake a physics cache that is not found at the shared path on the worker" },
        { key: "force", type: "bool", default: false, visible: "submission",
          description: "Bake again the tasks whose JSON report is newer than their outputs" },
        { key: "output_dir", type: "string", subtype: "dir_path", required: true, visible: "submission",
          description: "Folder of the loop files and reports (it must exist)" },
        { key: "bake_script", type: "string", subtype: "file_path", required: true, visible: "submission",
          description: "cyclic_loop_addon/bake.py of the Cyclic Loop project, where the workers see it" },
        { key: "blendfile", type: "string", required: true, visible: "web",
          description: "The scene to loop objects of" },
    ],
};

function compileJob(job) {
    const settings = job.settings;
    const outputs = splitList(settings.outputs, "outputs");
    for (const kind of outputs) {
        if (!(kind in OUTPUT_EXTENSIONS)) {
            throw `unknown output "${kind}": choose from ${Object.keys(OUTPUT_EXTENSIONS).join(", ")}`;
        }
    }
    const frames = parseFrames(settings.frames);
    const stem = safeName(path.basename(settings.blendfile).replace(/\.blend$/, ""));
    for (const group of objectGroups(settings.objects)) {
        const name = safeName(`${stem}-${group.names.join("+")}-${settings.variant}`);
        const task = author.Task(name, "blender");
        task.addCommand(author.Command("blender-render", {
            exe: "{blender}",
            exeArgs: "-b --factory-startup",
            argsBefore: ["--python-exit-code", "1"],
            blendfile: settings.blendfile,
            args: ["--python", settings.bake_script, "--"].concat(
                bakeArgs(settings, group, frames, outputs, path.join(settings.output_dir, name))),
        }));
        job.addTask(task);
    }
}

// bake.py's options for one object: those of a farm.py task of a variant with these five settings; init
// "auto" and substeps -1 are left to bake.py, which takes the model's defaults.
function bakeArgs(settings, group, frames, outputs, base) {
    let args = objectArgs(group).concat(["--frames", String(frames[0]), String(frames[1])]);
    for (const kind of outputs) {
        args.push(OUTPUT_OPTIONS[kind], base + OUTPUT_EXTENSIONS[kind]);
    }
    args.push("--json", base + ".json");
    for (const key of ["model", "init", "scheme", "substeps", "iterations"]) {
        if (MODEL_DEFAULT[key] !== settings[key]) args.push("--" + key, String(settings[key]));
    }
    if (settings.bake) args.push("--bake");
    if (!settings.force) args.push("--skip-existing");
    return args;
}

// The groups of the objects setting: {names, exact}: a JSON list (exact names) or the older comma form.
function objectGroups(text) {
    text = String(text || "").trim();
    if (!text.startsWith("[")) {
        return splitList(text, "objects").map((item) => ({ names: item.split("+"), exact: false }));
    }
    let items;
    try {
        items = JSON.parse(text);
    } catch (err) {
        throw `objects should be a JSON list of names, such as ["Flag", ["Sun", "Planet"]]: ${err.message}`;
    }
    const groups = (Array.isArray(items) ? items : [null]).map((item) => typeof item == "string" ? [item] : item);
    for (const names of groups) {
        if (!Array.isArray(names) || names.length == 0 || !names.every((n) => typeof n == "string" && n.length > 0)) {
            throw `objects should be a JSON list of names (a list inside it: N bodies), not ${JSON.stringify(names)}`;
        }
    }
    if (groups.length == 0) throw "no objects given";
    return groups.map((names) => ({ names, exact: true }));
}

// "--object=NAME" per exact name; the older form joins N bodies with commas, as bake.py reads them.
function objectArgs(group) {
    if (group.exact) return group.names.map((name) => `--object=${name}`);
    const value = group.names.join(",");
    return value.startsWith("-") ? [`--object=${value}`] : ["--object", value];
}

function splitList(text, what) {
    const items = String(text || "").split(",").map((s) => s.trim()).filter((s) => s.length > 0);
    if (items.length == 0) throw `no ${what} given`;
    return items;
}

function parseFrames(text) {
    const match = /^\s*(\d+)\s*-\s*(\d+)\s*$/.exec(String(text));
    if (!match || Number(match[1]) >= Number(match[2])) {
        throw `frames should be first-last with first < last (for example 49-72), not "${text}"`;
    }
    return [Number(match[1]), Number(match[2])];
}

// The task and file name farm.py gives: everything but letters, digits and ._+- replaced by "_".
function safeName(text) {
    return text.replace(/[^A-Za-z0-9._+-]/g, "_");
}
