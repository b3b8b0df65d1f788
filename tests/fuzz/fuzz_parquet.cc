// Fuzz target: the Parquet reader's decoders (worker/data/parquet_thrift.h, parquet_pages.h,
// parquet_format.h) on untrusted bytes, three ways:
//  - the input as Thrift compact metadata (FileMetaData) and as a page header;
//  - the input after two control bytes as one column chunk (its pages), with the physical
//    type, OPTIONAL or not, codec, output dtype and row range taken from those bytes;
//  - the input as a whole Parquet file held in memory: its footer checked as Dataset::Open
//    checks it, then every column chunk decoded as a reader would.
// Besides not crashing, leaking or tripping a sanitizer, it checks that a header's reported
// length stays within the input, that failures carry a message, and that a decode that
// succeeds appended exactly the rows asked for.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "worker/data/columns.h"
#include "worker/data/parquet_format.h"
#include "worker/data/parquet_pages.h"
#include "worker/data/parquet_thrift.h"

namespace {

using traintl::data::ColumnData;
using traintl::data::DType;
namespace pq = traintl::data::parquet;

constexpr DType kDTypes[] = {DType::kFloat64, DType::kInt64, DType::kString, DType::kFloat32,
                             DType::kInt32};

// Decodes rows [skip, skip + take) of a chunk and checks what came out.
void DecodeChunk(const uint8_t* data, size_t len, const pq::ChunkDesc& desc, int64_t skip,
                 int64_t take, DType dtype) {
  ColumnData out;
  const int64_t zero = 0;
  out.offsets.Append(&zero, sizeof zero);
  traintl::Status st = pq::DecodeColumnChunk(data, len, desc, skip, take, dtype, &out);
  if (!st.ok()) {
    FUZZ_CHECK(!st.message().empty());
    return;
  }
  if (dtype == DType::kString) {
    FUZZ_CHECK(out.offsets.size() == static_cast<size_t>(take + 1) * sizeof(int64_t));
  } else {
    FUZZ_CHECK(out.values.size() == static_cast<size_t>(take) * traintl::data::DTypeSize(dtype));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // 1. Metadata and a page header.
  auto meta = pq::DecodeFileMetaData(data, size);
  if (!meta.ok()) FUZZ_CHECK(!meta.status().message().empty());
  size_t used = 0;
  auto header = pq::DecodePageHeader(data, size, &used);
  if (header.ok()) FUZZ_CHECK(used <= size);

  // 2. One column chunk after two control bytes.
  if (size >= 2) {
    pq::ChunkDesc desc;
    desc.type = data[0] % 8;
    desc.optional = (data[0] & 8) != 0;
    desc.codec = (data[0] >> 4) % 8;
    desc.num_values = 1 << 20;
    const DType dtype = kDTypes[data[1] % 5];
    const int64_t skip = (data[1] >> 3) % 8;
    DecodeChunk(data + 2, size - 2, desc, skip, 1 + (data[1] >> 6) * 40, dtype);
  }

  // 3. A whole file.
  if (size >= 12 && std::memcmp(data + size - 4, "PAR1", 4) == 0) {
    uint32_t footer_len = 0;
    std::memcpy(&footer_len, data + size - 8, 4);
    if (uint64_t{footer_len} + 12 > size) return 0;
    auto layout = traintl::data::ParseParquetFooter("fuzz.parquet", size,
                                                    data + size - 8 - footer_len, footer_len);
    if (!layout.ok()) {
      FUZZ_CHECK(!layout.status().message().empty());
      return 0;
    }
    const auto& l = **layout;
    for (const auto& rg : l.meta.row_groups) {
      for (size_t c = 0; c < rg.columns.size(); ++c) {
        const auto& md = rg.columns[c].meta_data;
        const auto range = traintl::data::ColumnChunkRange(md);
        // ParseParquetFooter checked every range against the file.
        FUZZ_CHECK(range.offset + range.size <= size);
        pq::ChunkDesc desc;
        desc.type = md.type;
        desc.optional = l.columns[c].optional;
        desc.codec = md.codec;
        desc.num_values = md.num_values;
        const DType dtype = md.type == static_cast<int32_t>(pq::PhysicalType::kByteArray)
                                ? DType::kString
                                : DType::kFloat64;
        // At most a few thousand rows: a lying row count must fail, not run for long.
        const int64_t take = std::min<int64_t>(rg.num_rows, 4096);
        DecodeChunk(data + range.offset, static_cast<size_t>(range.size), desc, 0, take, dtype);
      }
    }
  }
  return 0;
}
