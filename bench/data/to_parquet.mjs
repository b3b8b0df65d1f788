// Writes the dataset benchmark's CSV (bench.py's generate(): 16 float columns f0..f15 and
// an int label) as Parquet with an independent writer (parquet-wasm: the Rust `parquet`
// crate), once per codec, so that bench/data compares traintl's Parquet and CSV paths on
// the same rows:
//   node bench/data/to_parquet.mjs CSV OUT_PREFIX [ROW_GROUP_ROWS]
// writes OUT_PREFIX-snappy.parquet and OUT_PREFIX-zstd.parquet with f* as DOUBLE (the
// CSV's decimals parsed as doubles), and OUT_PREFIX-float-snappy.parquet and
// OUT_PREFIX-float-zstd.parquet with f* as FLOAT (each decimal correctly rounded to
// float32, what strtof and traintl's CSV reader give: the training type of 6-decimal
// numbers, in half the bytes); label as INT64, PLAIN (no dictionary: random floats do not
// repeat), data page v1, row groups of ROW_GROUP_ROWS rows (default 65536).
// Needs the npm packages of tests/fixtures/parquet (cd there && npm install).
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const fixtures = path.join(here, '../../tests/fixtures/parquet');
const require = createRequire(path.join(fixtures, 'package.json'));
const arrow = await import(require.resolve('apache-arrow'));
const pw = require('parquet-wasm/node');

const [csv, prefix, rgArg] = process.argv.slice(2);
if (!csv || !prefix) {
  console.error('usage: node to_parquet.mjs CSV OUT_PREFIX [ROW_GROUP_ROWS]');
  process.exit(2);
}
const rowGroupRows = Number(rgArg || 65536);

// The float32 nearest to the decimal `text`, whose nearest double is `d`. Math.fround(d)
// rounds twice (decimal -> double -> float), which is wrong when d falls exactly on a
// midpoint between two floats; there the decimal decides, compared exactly.
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
const f64 = new Float64Array(1);
const u64 = new BigUint64Array(f64.buffer);
let midpoints = 0;
function toFloat32(text, d) {
  const f = Math.fround(d);
  if (f === d || !Number.isFinite(f)) return f;
  f32[0] = f;
  u32[0] += (Math.abs(d) > Math.abs(f)) ? 1 : -1;  // the float on d's other side
  const g = f32[0];
  if ((f + g) / 2 !== d) return f;  // not a midpoint: rounding twice is exact
  ++midpoints;
  // |d| = m * 2^e exactly; |text| = j / 10^k.
  f64[0] = Math.abs(d);
  const bits = u64[0];
  const be = Number(bits >> 52n);
  const m = (bits & ((1n << 52n) - 1n)) | (be === 0 ? 0n : 1n << 52n);
  const e = (be === 0 ? 1 : be) - 1075;
  const digits = text.replace('-', '');
  const point = digits.indexOf('.');
  const k = point < 0 ? 0 : digits.length - point - 1;
  const j = BigInt(digits.replace('.', ''));
  // Compare j / 10^k with m * 2^e.
  let lhs = j;
  let rhs = m * 10n ** BigInt(k);
  if (e >= 0) rhs <<= BigInt(e); else lhs <<= BigInt(-e);
  if (lhs === rhs) return f;  // exactly on the midpoint: fround's ties-to-even is right
  const larger = Math.abs(f) > Math.abs(g) ? f : g;
  const smaller = larger === f ? g : f;
  return lhs > rhs ? larger : smaller;
}

let names = null;
let cols = null;
let floats = null;
let rows = 0;
let cap = 1 << 20;
const rl = readline.createInterface({ input: fs.createReadStream(csv), crlfDelay: Infinity });
for await (const line of rl) {
  if (names === null) {
    names = line.split(',');
    cols = names.map(() => new Float64Array(cap));
    floats = names.map(() => new Float32Array(cap));
    continue;
  }
  if (line.length === 0) continue;
  if (rows === cap) {
    cap *= 2;
    cols = cols.map((c) => { const n = new Float64Array(cap); n.set(c); return n; });
    floats = floats.map((c) => { const n = new Float32Array(cap); n.set(c); return n; });
  }
  const fields = line.split(',');
  for (let i = 0; i < fields.length; ++i) {
    cols[i][rows] = Number(fields[i]);
    floats[i][rows] = toFloat32(fields[i], cols[i][rows]);
  }
  ++rows;
}

console.log(`${rows} rows; ${midpoints} values on a float32 rounding midpoint as doubles`);

// An Arrow IPC stream of the columns, f* as Float64 or Float32.
function ipcOf(float32) {
  const fields = names.map((n) => new arrow.Field(
      n, n === 'label' ? new arrow.Int64() : float32 ? new arrow.Float32() : new arrow.Float64(),
      false));
  const data = names.map((n, i) => {
    const values = (float32 && n !== 'label' ? floats : cols)[i].subarray(0, rows);
    const v = n === 'label' ? BigInt64Array.from(cols[i].subarray(0, rows), (x) => BigInt(x))
                            : values;
    return arrow.makeData({ type: fields[i].type, length: rows, nullCount: 0, data: v });
  });
  const struct = arrow.makeData({ type: new arrow.Struct(fields), length: rows, nullCount: 0,
                                  children: data });
  return arrow.tableToIPC(new arrow.Table(new arrow.RecordBatch(new arrow.Schema(fields), struct)),
                          'stream');
}

for (const [kind, float32] of [['', false], ['-float', true]]) {
  const ipc = ipcOf(float32);
  for (const [name, codec] of [['snappy', pw.Compression.SNAPPY], ['zstd', pw.Compression.ZSTD]]) {
    const props = new pw.WriterPropertiesBuilder()
                      .setCompression(codec)
                      .setDictionaryEnabled(false)
                      .setEncoding(pw.Encoding.PLAIN)
                      .setWriterVersion(pw.WriterVersion.V1)
                      .setMaxRowGroupSize(rowGroupRows)
                      .setCreatedBy('parquet-wasm (traintl bench/data)')
                      .build();
    const bytes = pw.writeParquet(pw.Table.fromIPCStream(ipc), props);
    const out = `${prefix}${kind}-${name}.parquet`;
    fs.writeFileSync(out, bytes);
    console.log(`${out}: ${rows} rows, ${bytes.length} bytes`);
  }
}
