#include "worker/data/parquet_thrift.h"

#include <cstring>
#include <utility>

namespace traintl {
namespace data {
namespace parquet {
namespace {

// Compact protocol element types.
enum : uint8_t {
  kStop = 0,
  kBoolTrue = 1,
  kBoolFalse = 2,
  kByte = 3,
  kI16 = 4,
  kI32 = 5,
  kI64 = 6,
  kDouble = 7,
  kBinary = 8,
  kList = 9,
  kSet = 10,
  kMap = 11,
  kStruct = 12,
};

// A cursor over compact-protocol bytes. The first error sticks: later reads fail too and
// return zeros, so a decoder can read a struct's fields and check ok() once per field.
class Reader {
 public:
  Reader(const uint8_t* data, size_t len) : p_(data), end_(data + len) {}

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  size_t consumed(const uint8_t* start) const { return static_cast<size_t>(p_ - start); }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  bool Fail(const std::string& why) {
    if (error_.empty()) error_ = why;
    p_ = end_;
    return false;
  }

  uint8_t Byte() {
    if (p_ >= end_) {
      Fail("the metadata ends in the middle of a value");
      return 0;
    }
    return *p_++;
  }
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t b = Byte();
      if (!ok()) return 0;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    Fail("a varint longer than 10 bytes");
    return 0;
  }
  int64_t ZigZag() {
    const uint64_t v = Varint();
    return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
  }
  int32_t I32() {
    const int64_t v = ZigZag();
    if (v < INT32_MIN || v > INT32_MAX) {
      Fail("an i32 out of range");
      return 0;
    }
    return static_cast<int32_t>(v);
  }
  std::string Binary() {
    const uint64_t n = Varint();
    if (!ok()) return {};
    if (n > remaining()) {
      Fail("a string of " + std::to_string(n) + " bytes where " + std::to_string(remaining()) +
           " remain");
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p_), static_cast<size_t>(n));
    p_ += n;
    return s;
  }
  // A list or set header: its element type and size. The size is checked against the
  // bytes left (every element takes at least one), which bounds what callers reserve.
  bool ListHeader(uint8_t* elem_type, uint64_t* size) {
    const uint8_t b = Byte();
    *elem_type = b & 0x0f;
    *size = b >> 4;
    if (*size == 15) *size = Varint();
    if (!ok()) return false;
    if (*size > remaining()) {
      return Fail("a list of " + std::to_string(*size) + " elements in " +
                  std::to_string(remaining()) + " bytes");
    }
    return true;
  }

  // A field header: false at the struct's end (or on an error). `last_id` is the previous
  // field's id (deltas are relative to it).
  bool FieldHeader(int16_t* last_id, int16_t* id, uint8_t* type) {
    const uint8_t b = Byte();
    if (!ok() || b == kStop) return false;
    *type = b & 0x0f;
    const uint8_t delta = b >> 4;
    if (delta != 0) {
      *id = static_cast<int16_t>(*last_id + delta);
    } else {
      const int64_t v = ZigZag();
      if (v < INT16_MIN || v > INT16_MAX) return Fail("a field id out of range");
      *id = static_cast<int16_t>(v);
    }
    *last_id = *id;
    return ok();
  }

  // Skips a value of compact type `type`. `in_list`: a bool element takes a byte there,
  // while a bool field's value is in its header.
  bool Skip(uint8_t type, int depth, bool in_list = false) {
    if (depth > kMaxThriftDepth) return Fail("the metadata nests deeper than 32 levels");
    switch (type) {
      case kBoolTrue:
      case kBoolFalse:
        if (in_list) Byte();
        return ok();
      case kByte:
        Byte();
        return ok();
      case kI16:
      case kI32:
      case kI64:
        Varint();
        return ok();
      case kDouble:
        if (remaining() < 8) return Fail("the metadata ends in the middle of a double");
        p_ += 8;
        return true;
      case kBinary: {
        const uint64_t n = Varint();
        if (!ok()) return false;
        if (n > remaining()) return Fail("a string longer than the metadata");
        p_ += n;
        return true;
      }
      case kList:
      case kSet: {
        uint8_t elem = 0;
        uint64_t n = 0;
        if (!ListHeader(&elem, &n)) return false;
        for (uint64_t i = 0; i < n; ++i) {
          if (!Skip(elem, depth + 1, true)) return false;
        }
        return true;
      }
      case kMap: {
        const uint64_t n = Varint();
        if (!ok()) return false;
        if (n == 0) return true;
        if (n > remaining()) return Fail("a map larger than the metadata");
        const uint8_t types = Byte();
        for (uint64_t i = 0; i < n; ++i) {
          if (!Skip(types >> 4, depth + 1, true) || !Skip(types & 0x0f, depth + 1, true)) {
            return false;
          }
        }
        return true;
      }
      case kStruct: {
        int16_t last = 0, id = 0;
        uint8_t t = 0;
        while (FieldHeader(&last, &id, &t)) {
          if (!Skip(t, depth + 1)) return false;
        }
        return ok();
      }
      default:
        return Fail("unknown compact-protocol type " + std::to_string(type));
    }
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  std::string error_;
};

// Reads a field's value as an integer of the expected kind; a field of another type is
// an error (a writer that disagrees with parquet.thrift).
bool ReadI32(Reader* r, uint8_t type, int32_t* out) {
  if (type != kI32 && type != kI16 && type != kByte) return r->Fail("an i32 field of another type");
  *out = type == kByte ? static_cast<int8_t>(r->Byte()) : r->I32();
  return r->ok();
}
bool ReadI64(Reader* r, uint8_t type, int64_t* out) {
  if (type != kI64 && type != kI32 && type != kI16) return r->Fail("an i64 field of another type");
  *out = r->ZigZag();
  return r->ok();
}
bool ReadBool(Reader* r, uint8_t type, bool* out) {
  if (type != kBoolTrue && type != kBoolFalse) return r->Fail("a bool field of another type");
  *out = type == kBoolTrue;
  return true;
}
bool ExpectType(Reader* r, uint8_t type, uint8_t want) {
  return type == want || r->Fail("a field of an unexpected type");
}

// Reads a list<T> field, calling `element(reader, elem_type)` for each element.
template <typename F>
bool ReadList(Reader* r, uint8_t type, F element) {
  if (!ExpectType(r, type, kList)) return false;
  uint8_t elem = 0;
  uint64_t n = 0;
  if (!r->ListHeader(&elem, &n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    if (!element(elem)) return false;
  }
  return r->ok();
}

// Reads a struct, calling `field(id, type)` for each field; it returns false for a field
// it does not know, which is then skipped.
template <typename F>
bool ReadStruct(Reader* r, int depth, F field) {
  if (depth > kMaxThriftDepth) return r->Fail("the metadata nests deeper than 32 levels");
  int16_t last = 0, id = 0;
  uint8_t type = 0;
  while (r->FieldHeader(&last, &id, &type)) {
    if (!field(id, type)) {
      if (!r->ok()) return false;
      if (!r->Skip(type, depth + 1)) return false;
    }
    if (!r->ok()) return false;
  }
  return r->ok();
}

bool ReadSchemaElement(Reader* r, int depth, SchemaElement* e) {
  return ReadStruct(r, depth, [&](int16_t id, uint8_t t) {
    int32_t v = 0;
    switch (id) {
      case 1:
        if (ReadI32(r, t, &v)) e->type = v;
        return true;
      case 3:
        ReadI32(r, t, &e->repetition);
        return true;
      case 4:
        if (ExpectType(r, t, kBinary)) e->name = r->Binary();
        return true;
      case 5:
        ReadI32(r, t, &e->num_children);
        return true;
      case 6:
        if (ReadI32(r, t, &v)) e->converted_type = v;
        return true;
      default:
        return false;
    }
  });
}

bool ReadColumnMetaData(Reader* r, int depth, ColumnMetaData* m) {
  return ReadStruct(r, depth, [&](int16_t id, uint8_t t) {
    switch (id) {
      case 1:
        ReadI32(r, t, &m->type);
        return true;
      case 2:
        ReadList(r, t, [&](uint8_t et) {
          int32_t v = 0;
          if (ReadI32(r, et, &v)) m->encodings.push_back(v);
          return r->ok();
        });
        return true;
      case 3:
        ReadList(r, t, [&](uint8_t et) {
          if (ExpectType(r, et, kBinary)) m->path.push_back(r->Binary());
          return r->ok();
        });
        return true;
      case 4:
        ReadI32(r, t, &m->codec);
        return true;
      case 5:
        ReadI64(r, t, &m->num_values);
        return true;
      case 6:
        ReadI64(r, t, &m->total_uncompressed_size);
        return true;
      case 7:
        ReadI64(r, t, &m->total_compressed_size);
        return true;
      case 9:
        ReadI64(r, t, &m->data_page_offset);
        return true;
      case 11: {
        int64_t v = 0;
        if (ReadI64(r, t, &v)) m->dictionary_page_offset = v;
        return true;
      }
      case 14: {
        int64_t v = 0;
        if (ReadI64(r, t, &v)) m->bloom_filter_offset = v;
        return true;
      }
      default:
        return false;
    }
  });
}

bool ReadColumnChunk(Reader* r, int depth, ColumnChunk* c) {
  return ReadStruct(r, depth, [&](int16_t id, uint8_t t) {
    switch (id) {
      case 1:
        if (ExpectType(r, t, kBinary)) c->file_path = r->Binary();
        return true;
      case 3:
        c->has_meta_data = true;
        if (ExpectType(r, t, kStruct)) ReadColumnMetaData(r, depth + 1, &c->meta_data);
        return true;
      case 8:
      case 9:
        c->encrypted = true;
        return false;  // skipped
      default:
        return false;
    }
  });
}

bool ReadRowGroup(Reader* r, int depth, RowGroup* g) {
  return ReadStruct(r, depth, [&](int16_t id, uint8_t t) {
    switch (id) {
      case 1:
        ReadList(r, t, [&](uint8_t et) {
          if (!ExpectType(r, et, kStruct)) return false;
          g->columns.emplace_back();
          return ReadColumnChunk(r, depth + 1, &g->columns.back());
        });
        return true;
      case 3:
        ReadI64(r, t, &g->num_rows);
        return true;
      default:
        return false;
    }
  });
}

}  // namespace

const char* PhysicalTypeName(int32_t type) {
  static const char* const kNames[] = {"BOOLEAN", "INT32",  "INT64",      "INT96",
                                       "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  return type >= 0 && type < 8 ? kNames[type] : "an unknown type";
}

const char* EncodingName(int32_t encoding) {
  static const char* const kNames[] = {
      "PLAIN",          "GROUP_VAR_INT",       "PLAIN_DICTIONARY",        "RLE",
      "BIT_PACKED",     "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
      "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  return encoding >= 0 && encoding < 10 ? kNames[encoding] : "an unknown encoding";
}

const char* CodecName(int32_t codec) {
  static const char* const kNames[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO",
                                       "BROTLI",       "LZ4",    "ZSTD", "LZ4_RAW"};
  return codec >= 0 && codec < 8 ? kNames[codec] : "an unknown codec";
}

Result<FileMetaData> DecodeFileMetaData(const uint8_t* data, size_t len) {
  Reader r(data, len);
  FileMetaData m;
  ReadStruct(&r, 0, [&](int16_t id, uint8_t t) {
    switch (id) {
      case 2:
        ReadList(&r, t, [&](uint8_t et) {
          if (!ExpectType(&r, et, kStruct)) return false;
          m.schema.emplace_back();
          return ReadSchemaElement(&r, 1, &m.schema.back());
        });
        return true;
      case 3:
        ReadI64(&r, t, &m.num_rows);
        return true;
      case 4:
        ReadList(&r, t, [&](uint8_t et) {
          if (!ExpectType(&r, et, kStruct)) return false;
          m.row_groups.emplace_back();
          return ReadRowGroup(&r, 1, &m.row_groups.back());
        });
        return true;
      case 8:
        m.encrypted = true;
        return false;  // skipped
      default:
        return false;
    }
  });
  if (!r.ok()) return Status::InvalidArgument("bad file metadata (footer): " + r.error());
  return m;
}

Result<PageHeader> DecodePageHeader(const uint8_t* data, size_t len, size_t* consumed) {
  Reader r(data, len);
  PageHeader h;
  ReadStruct(&r, 0, [&](int16_t id, uint8_t t) {
    switch (id) {
      case 1:
        ReadI32(&r, t, &h.type);
        return true;
      case 2:
        ReadI32(&r, t, &h.uncompressed_page_size);
        return true;
      case 3:
        ReadI32(&r, t, &h.compressed_page_size);
        return true;
      case 5: {
        if (!ExpectType(&r, t, kStruct)) return true;
        DataPageHeader d;
        ReadStruct(&r, 1, [&](int16_t fid, uint8_t ft) {
          switch (fid) {
            case 1:
              return ReadI32(&r, ft, &d.num_values) || true;
            case 2:
              return ReadI32(&r, ft, &d.encoding) || true;
            case 3:
              return ReadI32(&r, ft, &d.definition_level_encoding) || true;
            case 4:
              return ReadI32(&r, ft, &d.repetition_level_encoding) || true;
            default:
              return false;
          }
        });
        h.data_page = d;
        return true;
      }
      case 7: {
        if (!ExpectType(&r, t, kStruct)) return true;
        DictionaryPageHeader d;
        ReadStruct(&r, 1, [&](int16_t fid, uint8_t ft) {
          switch (fid) {
            case 1:
              return ReadI32(&r, ft, &d.num_values) || true;
            case 2:
              return ReadI32(&r, ft, &d.encoding) || true;
            default:
              return false;
          }
        });
        h.dictionary_page = d;
        return true;
      }
      case 8: {
        if (!ExpectType(&r, t, kStruct)) return true;
        DataPageHeaderV2 d;
        ReadStruct(&r, 1, [&](int16_t fid, uint8_t ft) {
          switch (fid) {
            case 1:
              return ReadI32(&r, ft, &d.num_values) || true;
            case 2:
              return ReadI32(&r, ft, &d.num_nulls) || true;
            case 3:
              return ReadI32(&r, ft, &d.num_rows) || true;
            case 4:
              return ReadI32(&r, ft, &d.encoding) || true;
            case 5:
              return ReadI32(&r, ft, &d.definition_levels_byte_length) || true;
            case 6:
              return ReadI32(&r, ft, &d.repetition_levels_byte_length) || true;
            case 7:
              return ReadBool(&r, ft, &d.is_compressed) || true;
            default:
              return false;
          }
        });
        h.data_page_v2 = d;
        return true;
      }
      default:
        return false;
    }
  });
  if (!r.ok()) return Status::InvalidArgument("bad page header: " + r.error());
  *consumed = r.consumed(data);
  return h;
}

}  // namespace parquet
}  // namespace data
}  // namespace traintl
