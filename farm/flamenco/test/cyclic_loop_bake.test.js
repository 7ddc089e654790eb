// node --test farm/flamenco/test/cyclic_loop_bake.test.js : the Flamenco job type's settings and the commands it authors.
"use strict";
const assert = require("node:assert/strict");
const path = require("node:path");
const test = require("node:test");
const { compile, commandLine } = require("./flamenco_standin.js");

const SCRIPT = path.join(__dirname, "..", "cyclic_loop_bake.js");
const SETTINGS = {
    objects: "Flag, Banner 2", frames: "49-72", output_dir: "/farm/loops", bake_script: "/farm/cyclic_loop/bake.py",
    blendfile: "/farm/scenes/props.blend", init: "cache", iterations: 20,
};

test("settings are shown with their defaults and evaluated from the active object's loop settings", () => {
    const { jobType } = compile(SCRIPT, SETTINGS);
    const byKey = Object.fromEntries(jobType.settings.map((s) => [s.key, s]));
    assert.equal(byKey.frames.eval, "f'{C.object.cyclic_loop_settings.frame_start}-{C.object.cyclic_loop_settings.frame_end}'");
    assert.equal(byKey.iterations.eval, "C.object.cyclic_loop_settings.max_iters");
    assert.deepEqual([...byKey.init.choices],
        ["auto", "fast_projection", "forward", "crossfade", "cache", "cache_or_forward"]);
    assert.deepEqual([byKey.init.default, byKey.substeps.default], ["auto", -1]);
    assert.equal(byKey.output_dir.subtype, "dir_path");
});

test("one blender task per object, each running bake.py with its own outputs and report", () => {
    const { tasks } = compile(SCRIPT, SETTINGS);
    assert.deepEqual(tasks.map((t) => [t.name, t.type, t.commands.length]),
        [["props-Flag-default", "blender", 1], ["props-Banner_2-default", "blender", 1]]);
    assert.deepEqual(commandLine(tasks[1].commands[0]), [
        "{blender}", "-b", "--factory-startup", "--python-exit-code", "1", "/farm/scenes/props.blend",
        "--python", "/farm/cyclic_loop/bake.py", "--",
        "--object", "Banner 2", "--frames", "49", "72",
        "--output", "/farm/loops/props-Banner_2-default.blend", "--pc2", "/farm/loops/props-Banner_2-default.pc2",
        "--json", "/farm/loops/props-Banner_2-default.json",
        "--model", "auto", "--init", "cache", "--scheme", "auto", "--iterations", "20",
        "--bake", "--skip-existing"]);
});

test("init auto and substeps -1 leave bake.py the model's defaults; other values are passed on", () => {
    const { tasks } = compile(SCRIPT, { ...SETTINGS, init: "auto" });
    const line = commandLine(tasks[0].commands[0]);
    assert.ok(!line.includes("--init") && !line.includes("--substeps"), line.join(" "));
    const { tasks: set } = compile(SCRIPT, { ...SETTINGS, init: "cache_or_forward", substeps: 0 });
    const given = commandLine(set[0].commands[0]);
    assert.deepEqual(given.slice(given.indexOf("--init"), given.indexOf("--init") + 2), ["--init", "cache_or_forward"]);
    assert.deepEqual(given.slice(given.indexOf("--substeps"), given.indexOf("--substeps") + 2), ["--substeps", "0"]);
});

test("N bodies joined with + are one task; force and no bake drop their flags", () => {
    const { tasks } = compile(SCRIPT, { ...SETTINGS, objects: "Sun+Planet+Moon", outputs: "blend", force: true,
                                         bake: false, variant: "final" });
    assert.equal(tasks.length, 1);
    assert.equal(tasks[0].name, "props-Sun+Planet+Moon-final");
    const line = commandLine(tasks[0].commands[0]);
    assert.deepEqual(line.slice(line.indexOf("--object"), line.indexOf("--object") + 2), ["--object", "Sun,Planet,Moon"]);
    assert.ok(!line.includes("--skip-existing") && !line.includes("--bake") && !line.includes("--pc2"));
});

test("bad settings are refused at submission with what to change", () => {
    assert.throws(() => compile(SCRIPT, { ...SETTINGS, outputs: "blend,fbx" }), /unknown output "fbx"/);
    assert.throws(() => compile(SCRIPT, { ...SETTINGS, frames: "72-49" }), /frames should be first-last/);
    assert.throws(() => compile(SCRIPT, { ...SETTINGS, objects: " , " }), /no objects given/);
    const { output_dir, ...noOutput } = SETTINGS;
    assert.throws(() => compile(SCRIPT, noOutput), /required setting "output_dir" missing/);
});

test("the stand-in refuses what Flamenco refuses", (t) => {
    const fs = require("node:fs");
    const os = require("node:os");
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "flamenco-"));
    t.after(() => fs.rmSync(dir, { recursive: true }));
    const script = (body) => {
        const file = path.join(dir, "job.js");
        fs.writeFileSync(file, `const JOB_TYPE = { label: "x", settings: [] };\nfunction compileJob(job) { ${body} }`);
        return file;
    };
    const render = (params) => `{ const t = author.Task("a", "blender"); t.addCommand(author.Command("blender-render", ${params})); job.addTask(t); }`;
    const good = `{exe: "{blender}", exeArgs: "-b", argsBefore: [], blendfile: "a.blend", args: []}`;
    assert.equal(compile(script(render(good)), {}).tasks.length, 1);
    assert.throws(() => compile(script(render(`{exe: "{blender}", exeArgs: "-b", argsBefore: [], blendfile: "a.blend", arguments: []}`)), {}),
        /no parameter "arguments"/);
    assert.throws(() => compile(script(render(`{exe: "{blender}", exeArgs: ["-b"], argsBefore: [], blendfile: "a.blend", args: []}`)), {}),
        /"exeArgs" should be a string/);
    assert.throws(() => compile(script(`job.addTask(author.Task("a", "render"))`), {}), /unknown task type "render"/);
    assert.throws(() => compile(script(render(good) + render(good)), {}), /two tasks are named "a"/);
});
