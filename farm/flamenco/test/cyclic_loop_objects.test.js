// node --test farm/flamenco/test/cyclic_loop_objects.test.js : object names reach bake.py as they are (a JSON list).
"use strict";
const assert = require("node:assert/strict");
const path = require("node:path");
const test = require("node:test");
const { compile, commandLine } = require("./flamenco_standin.js");

const SCRIPT = path.join(__dirname, "..", "cyclic_loop_bake.js");
const SETTINGS = {
    objects: "Flag", frames: "49-72", output_dir: "/farm/loops", bake_script: "/farm/cyclic_loop/bake.py",
    blendfile: "/farm/scenes/props.blend", init: "cache", iterations: 20,
};

test("objects as a JSON list: exact names, one --object=NAME each, never split or read as an option", () => {
    const objects = JSON.stringify(["Flag,with,commas", " Banner 2 ", "-b", ["Sun", "Planet+Moon"]]);
    const { tasks, jobType } = compile(SCRIPT, { ...SETTINGS, objects });
    assert.match(jobType.settings.find((s) => s.key == "objects").eval, /json'\)\.dumps\(/);
    assert.deepEqual(tasks.map((t) => t.name),
        ["props-Flag_with_commas-default", "props-_Banner_2_-default", "props--b-default", "props-Sun+Planet+Moon-default"]);
    const objectsOf = (task) => commandLine(task.commands[0]).filter((a) => a.startsWith("--object"));
    assert.deepEqual(tasks.map(objectsOf), [["--object=Flag,with,commas"], ["--object= Banner 2 "], ["--object=-b"],
                                            ["--object=Sun", "--object=Planet+Moon"]]);
    assert.throws(() => compile(SCRIPT, { ...SETTINGS, objects: '["Flag", 3]' }), /JSON list of names/);
    assert.throws(() => compile(SCRIPT, { ...SETTINGS, objects: '["Flag"' }), /JSON list of names/);
    assert.throws(() => compile(SCRIPT, { ...SETTINGS, objects: "[]" }), /no objects given/);
    const { tasks: older } = compile(SCRIPT, { ...SETTINGS, objects: "-b" });
    assert.deepEqual(objectsOf(older[0]), ["--object=-b"]);
});
