// A stand-in for the Flamenco 3 Manager's job compiler (the manager is a Go program, not installable
// from a package registry): it runs a job type script in a fresh global scope with the globals the
// manager gives it (author, print, path), fills in setting defaults and checks required settings as
// the manager does, and checks every authored task and command as strictly as its Go side: task
// types, the blender-render parameters and their types, unique task names, dependencies on tasks of
// the same job. `commandLine` is what a worker runs for a blender-render command:
// {exe} {exeArgs} {argsBefore} {blendfile} {args}.
"use strict";
const fs = require("node:fs");
const nodePath = require("node:path");
const vm = require("node:vm");

const TASK_TYPES = new Set(["blender", "ffmpeg", "file-management", "misc"]);
const SETTING_TYPES = new Set(["string", "int32", "float", "bool"]);
const BLENDER_RENDER = { exe: "string", exeArgs: "string", argsBefore: "array", blendfile: "string", args: "array" };

function fail(message) {
    throw new Error(`Flamenco stand-in: ${message}`);
}

function checkBlenderRender(params) {
    for (const key of Object.keys(params)) {
        if (!(key in BLENDER_RENDER)) fail(`blender-render has no parameter "${key}"`);
    }
    for (const [key, kind] of Object.entries(BLENDER_RENDER)) {
        const value = params[key];
        const ok = kind == "array" ? Array.isArray(value) && value.every((v) => typeof v == "string")
            : typeof value == "string";
        if (!ok) fail(`blender-render parameter "${key}" should be a ${kind == "array" ? "list of strings" : kind}`);
    }
    if (!params.exe) fail("blender-render needs an exe");
}

class AuthoredCommand {
    constructor(name, parameters) {
        if (name == "blender-render") checkBlenderRender(parameters);
        else if (!["exec", "echo", "sleep", "frames-to-video", "move-directory", "copy-file"].includes(name)) {
            fail(`no worker command "${name}"`);
        }
        this.name = name;
        this.parameters = parameters;
    }
}

class AuthoredTask {
    constructor(name, type) {
        if (typeof name != "string" || !name) fail("a task needs a name");
        if (!TASK_TYPES.has(type)) fail(`unknown task type "${type}"`);
        this.name = name;
        this.type = type;
        this.commands = [];
        this.dependencies = [];
    }
    addCommand(command) {
        if (!(command instanceof AuthoredCommand)) fail("addCommand takes an author.Command");
        this.commands.push(command);
    }
    addDependency(task) {
        if (!(task instanceof AuthoredTask)) fail("addDependency takes an author.Task");
        this.dependencies.push(task);
    }
}

function checkJobType(jobType) {
    if (typeof jobType.label != "string" || !Array.isArray(jobType.settings)) fail("JOB_TYPE needs a label and settings");
    for (const s of jobType.settings) {
        if (typeof s.key != "string" || !SETTING_TYPES.has(s.type)) fail(`bad setting ${JSON.stringify(s)}`);
        if (s.choices && !(s.choices.includes(s.default))) fail(`setting ${s.key}: default not among its choices`);
    }
}

// Compile a job of the job type in `scriptPath` with the given settings; returns {jobType, tasks}.
function compile(scriptPath, settings, name = "test job") {
    const printed = [];
    const context = vm.createContext({
        author: { Task: (n, t) => new AuthoredTask(n, t), Command: (n, p) => new AuthoredCommand(n, p) },
        print: (...args) => printed.push(args.join(" ")),
        path: { join: nodePath.posix.join, basename: nodePath.posix.basename, dirname: nodePath.posix.dirname },
    });
    const source = fs.readFileSync(scriptPath, "utf8");
    const { jobType, compileJob } = vm.runInContext(`${source}\n;({ jobType: JOB_TYPE, compileJob })`, context,
        { filename: scriptPath });
    checkJobType(jobType);
    const values = {};
    for (const s of jobType.settings) {
        if (s.key in settings) values[s.key] = settings[s.key];
        else if ("default" in s) values[s.key] = s.default;
        else if (s.required) fail(`required setting "${s.key}" missing`);
    }
    const tasks = [];
    const job = {
        name, settings: values, created: new Date(0),
        addTask(task) {
            if (!(task instanceof AuthoredTask)) fail("addTask takes an author.Task");
            if (tasks.some((t) => t.name == task.name)) fail(`two tasks are named "${task.name}"`);
            if (task.commands.length == 0) fail(`task "${task.name}" has no commands`);
            tasks.push(task);
        },
    };
    compileJob(job);
    for (const task of tasks) {
        for (const dep of task.dependencies) if (!tasks.includes(dep)) fail(`"${task.name}" depends on a task not in the job`);
    }
    return { jobType, tasks, printed };
}

// The command line a worker runs for a blender-render command ({blender} left as is).
function commandLine(command) {
    const p = command.parameters;
    return [p.exe, ...p.exeArgs.split(/\s+/).filter((a) => a), ...p.argsBefore, p.blendfile, ...p.args];
}

module.exports = { compile, commandLine };
