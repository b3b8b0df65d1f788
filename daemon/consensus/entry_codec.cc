#include "daemon/consensus/entry_codec.h"

#include <cstring>

namespace traintl::raft_codec {

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

void EncodeCommandEntry(std::string_view command, uint64_t tag, char* out) {
  PutU32(out, kCommandMagic);
  PutU32(out + 4, static_cast<uint32_t>(command.size()));
  PutU64(out + 8, tag);
  if (!command.empty()) std::memcpy(out + kCommandHeaderBytes, command.data(), command.size());
}

std::optional<DecodedCommand> DecodeCommandEntry(const void* data, size_t len, std::string* error) {
  const char* p = static_cast<const char*>(data);
  if (len < kCommandHeaderBytes || GetU32(p) != kCommandMagic) {
    if (error) *error = "entry of " + std::to_string(len) + " bytes without a command header";
    return std::nullopt;
  }
  const size_t length = GetU32(p + 4);
  if (length > len - kCommandHeaderBytes) {
    if (error) {
      *error = "entry of " + std::to_string(len) + " bytes claiming " + std::to_string(length);
    }
    return std::nullopt;
  }
  DecodedCommand out;
  out.command = std::string_view(p + kCommandHeaderBytes, length);
  out.tag = GetU64(p + 8);
  return out;
}

void EncodeSnapshotImage(std::string_view state, char* out) {
  PutU32(out, kSnapshotMagic);
  PutU32(out + 4, 0);
  PutU64(out + 8, state.size());
  if (!state.empty()) std::memcpy(out + kSnapshotHeaderBytes, state.data(), state.size());
}

std::optional<std::string_view> DecodeSnapshotImage(const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  if (len < kSnapshotHeaderBytes || GetU32(p) != kSnapshotMagic ||
      GetU64(p + 8) > len - kSnapshotHeaderBytes) {
    return std::nullopt;
  }
  return std::string_view(p + kSnapshotHeaderBytes, static_cast<size_t>(GetU64(p + 8)));
}

}  // namespace traintl::raft_codec
