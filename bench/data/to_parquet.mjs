// Writes the dataset benchmark's CSV (bench.py's generate(): 16 float columns f0..f15 and
// an int label) as Parquet with an independent writer (parquet-wasm: the Rust `parquet`
// crate), once per codec, so that bench/data compares traintl's Parquet and CSV paths on
// the same rows:
//   node bench/data/to_parquet.mjs CSV OUT_PREFIX [ROW_GROUP_ROWS]
// writes OUT_PREFIX-snappy.parquet and OUT_PREFIX-zstd.parquet: f* as DOUBLE (the CSV's
// decimals parsed as doubles), label as INT64, PLAIN (no dictionary: random floats do not
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

let names = null;
let cols = null;
let rows = 0;
let cap = 1 << 20;
const rl = readline.createInterface({ input: fs.createReadStream(csv), crlfDelay: Infinity });
for await (const line of rl) {
  if (names === null) {
    names = line.split(',');
    cols = names.map(() => new Float64Array(cap));
    continue;
  }
  if (line.length === 0) continue;
  if (rows === cap) {
    cap *= 2;
    cols = cols.map((c) => { const n = new Float64Array(cap); n.set(c); return n; });
  }
  const fields = line.split(',');
  for (let i = 0; i < fields.length; ++i) cols[i][rows] = Number(fields[i]);
  ++rows;
}

const fields = names.map((n) => new arrow.Field(n, n === 'label' ? new arrow.Int64()
                                                               : new arrow.Float64(), false));
const data = names.map((n, i) => {
  const values = cols[i].subarray(0, rows);
  const v = n === 'label' ? BigInt64Array.from(values, (x) => BigInt(x)) : values;
  return arrow.makeData({ type: fields[i].type, length: rows, nullCount: 0, data: v });
});
const struct = arrow.makeData({ type: new arrow.Struct(fields), length: rows, nullCount: 0,
                                children: data });
const table = new arrow.Table(new arrow.RecordBatch(new arrow.Schema(fields), struct));
const ipc = arrow.tableToIPC(table, 'stream');

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
  const out = `${prefix}-${name}.parquet`;
  fs.writeFileSync(out, bytes);
  console.log(`${out}: ${rows} rows, ${bytes.length} bytes`);
}
