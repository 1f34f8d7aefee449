// wprobe-transform.mjs - the AssemblyScript compiler transform of the wprobe SDK
// (asc --transform ./wprobe-transform.mjs; asconfig.json names it). It does the
// two things a handler module needs that asc cannot be told with options:
//
// 1. The manifest. The entry file's top-level `const WPROBE_MANIFEST = `...``
//    (a string or a template literal without substitutions) is written, after
//    wprobe.ts's MANIFEST_HEAD (format and ABI version), as the module's
//    `wprobe.manifest` custom section. A module without it has no manifest
//    (bind its handlers with `wprobe run --probe LOCATION=EXPORT`).
//
// 2. No start function. wprobe refuses modules with one (guest code runs only
//    at hits), and AssemblyScript's runtime needs one as soon as a module
//    allocates (its heap pointer) or has a global initialised by code. The
//    transform removes it and calls it from every exported function instead,
//    once, guarded by a global: the first hit runs it under that hit's fuel.
import { Transform } from "assemblyscript/transform";
import binaryen from "binaryen";

const SECTION = "wprobe.manifest";

/** The value of a top-level `const NAME = <string>` of `source`, or null. */
function stringConstant(source, name) {
  for (const statement of source.statements) {
    for (const d of statement.declarations ?? []) {
      if (d.name?.text !== name || !d.initializer) continue;
      const init = d.initializer;
      if (typeof init.value === "string") return init.value;
      if (Array.isArray(init.parts) && init.parts.length === 1) return init.parts[0];
      throw new Error(`wprobe: ${name} in ${source.normalizedPath} must be a string literal (no substitutions)`);
    }
  }
  return null;
}

export default class WprobeTransform extends Transform {
  afterParse(parser) {
    let head = null;
    this.manifest = null;
    for (const source of parser.sources) {
      if (source.internalPath.startsWith("~lib/")) continue;
      const h = stringConstant(source, "MANIFEST_HEAD");
      if (h !== null && source.internalPath.endsWith("wprobe")) head = h;
      // The entry file is the user's (sourceKind 1: USER_ENTRY).
      if (source.sourceKind === 1) {
        const m = stringConstant(source, "WPROBE_MANIFEST");
        if (m !== null) this.manifest = m;
      }
    }
    if (this.manifest !== null) {
      if (head === null) throw new Error("wprobe: WPROBE_MANIFEST needs `import ... from \"wprobe\"` (its MANIFEST_HEAD)");
      const body = this.manifest.replace(/^\n/, "");
      this.manifest = head + body + (body.endsWith("\n") ? "" : "\n");
    }
  }

  afterCompile(module) {
    const start = module.getStart();
    if (start) {
      const startName = binaryen.getFunctionInfo(start).name;
      module.setStart(0);
      const started = "~wprobe/started";
      module.addGlobal(started, binaryen.i32, true, module.i32.const(0));
      for (let i = 0, n = module.getNumExports(); i < n; i++) {
        const info = binaryen.getExportInfo(module.getExportByIndex(i));
        if (info.kind !== binaryen.ExternalFunction) continue;
        const fn = module.getFunction(info.value);
        const fi = binaryen.getFunctionInfo(fn);
        const once = module.if(
          module.i32.eqz(module.global.get(started, binaryen.i32)),
          module.block(null, [
            module.global.set(started, module.i32.const(1)),
            module.call(startName, [], binaryen.none),
          ]),
        );
        binaryen._BinaryenFunctionSetBody(fn, module.block(null, [once, fi.body], fi.results));
      }
    }
    if (this.manifest !== null) {
      module.addCustomSection(SECTION, new TextEncoder().encode(this.manifest));
    }
  }
}
