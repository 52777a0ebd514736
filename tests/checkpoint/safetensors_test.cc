// The safetensors reader and writer, and every malformed-file case.
#include "glmnorm/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "array_file.h"
#include "fixtures.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"

namespace glmnorm {
namespace {

using test::RawSafetensors;
using ::testing::AllOf;
using ::testing::HasSubstr;

// The message of the Error that parsing `image` throws ("" when it parses).
std::string ParseError(const std::vector<std::byte>& image) {
  try {
    SafetensorsFile::Parse(image, "t.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The same, for a file on disk (exercises the mapping too).
std::string OpenError(const std::vector<std::byte>& image) {
  test::TempDir dir;
  const std::string path = dir / "t.safetensors";
  test::WriteFile(path, image);
  try {
    SafetensorsFile::Open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::byte> TwoTensors() {
  const std::vector<std::byte> a = test::BytesOf(std::vector<float>{1.0f, -2.0f, 3.5f});
  const std::vector<std::byte> b = test::BytesOf(test::Bf16({0.5f, 0.25f, 8.0f, -1.0f}));
  const SafetensorsEntry entries[] = {
      {"b", "BF16", {2, 2}, b},
      {"a", "F32", {3}, a},
  };
  return EncodeSafetensors(entries, {{"format", "pt"}});
}

TEST(Safetensors, RoundTripsThroughTheWriter) {
  test::TempDir dir;
  test::WriteFile(dir / "ok.safetensors", TwoTensors());
  const SafetensorsFile f = SafetensorsFile::Open(dir / "ok.safetensors");
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const SafetensorsTensor* a = f.Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, "F32");
  EXPECT_EQ(a->shape, (std::vector<int64_t>{3}));
  const ConstTensorView av = f.View(*a);
  EXPECT_EQ(av.dtype, DType::kF32);
  EXPECT_EQ(av.width(), 3);
  EXPECT_EQ(static_cast<const float*>(av.data)[2], 3.5f);
  const ConstTensorView bv = f.View(*f.Find("b"));
  EXPECT_EQ(bv.rank, 2);
  EXPECT_EQ(bv.stride[0], 2);
  EXPECT_EQ(F32FromBF16(static_cast<const uint16_t*>(bv.data)[2]), 8.0f);
  EXPECT_EQ(f.Find("c"), nullptr);
  // The writer aligns the data section and orders wide types first.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(av.data) % 4, 0u);
}

TEST(Safetensors, ReadsFilesWrittenByTheSafetensorsLibrary) {
  const SafetensorsFile f = SafetensorsFile::Open(std::string(GLMNORM_TEST_DATA) +
                                                  "/tiny_glm45/model-00015-of-00015.safetensors");
  const SafetensorsTensor* t = f.Find("model.layers.3.enorm.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, "BF16");
  EXPECT_EQ(t->shape, (std::vector<int64_t>{64}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST(Safetensors, AcceptsEveryDtypeOfTheFormat) {
  for (const char* dtype :
       {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",
        "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64", "C64"}) {
    const int bytes = SafetensorsDTypeBits(dtype) / 8;
    const std::string header = std::string("{\"t\":{\"dtype\":\"") + dtype +
                               "\",\"shape\":[2],\"data_offsets\":[0," + std::to_string(2 * bytes) +
                               "]}}";
    EXPECT_EQ(ParseError(RawSafetensors(header, 2 * bytes)), "") << dtype;
  }
  // Sub-byte types must fill whole bytes.
  EXPECT_EQ(
      ParseError(RawSafetensors(R"({"t":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}})", 2)),
      "");
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2)),
      HasSubstr("not a whole number of bytes"));
  EXPECT_EQ(ParseError(RawSafetensors(
                R"({"t":{"dtype":"F6_E2M3","shape":[2,2],"data_offsets":[0,3]}})", 3)),
            "");
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"t":{"dtype":"F6_E3M2","shape":[],"data_offsets":[0,1]}})", 1)),
      HasSubstr("not a whole number of bytes"));
}

TEST(Safetensors, ZeroSizedTensorsAndEmptyHeaderAreValid) {
  EXPECT_EQ(ParseError(RawSafetensors(R"({"e":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},)"
                                      R"("s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
                                      4)),
            "");
  EXPECT_EQ(ParseError(RawSafetensors("{}", 0)), "");
  EXPECT_EQ(ParseError(RawSafetensors("{}      ", 0)), "");   // space padding
  EXPECT_EQ(ParseError(RawSafetensors("{} \t\r\n", 0)), "");  // any JSON whitespace
  // Several zero-size tensors at one offset, before, between and after others.
  EXPECT_EQ(ParseError(RawSafetensors(R"({"a":{"dtype":"I64","shape":[0],"data_offsets":[0,0]},)"
                                      R"("b":{"dtype":"U8","shape":[2,0],"data_offsets":[0,0]},)"
                                      R"("c":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                      R"("d":{"dtype":"F32","shape":[0],"data_offsets":[1,1]}})",
                                      1)),
            "");
  // A zero dimension makes any other size valid, as long as the product is
  // computed without overflow in the reference's order.
  EXPECT_EQ(
      ParseError(RawSafetensors(
          R"({"t":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", 0)),
      "");
}

TEST(Safetensors, NullOrEmptyMetadataIsNoMetadata) {
  // The reference reads __metadata__ as Option<HashMap<String, String>>:
  // null is valid and means none (safe_open(...).metadata() is None).
  for (const char* metadata : {"null", "{}"}) {
    const std::vector<std::byte> image =
        RawSafetensors(std::string(R"({"__metadata__":)") + metadata +
                           R"(,"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})",
                       4);
    const SafetensorsFile f = SafetensorsFile::Parse(image, "m.safetensors");
    EXPECT_TRUE(f.metadata().empty()) << metadata;
    ASSERT_NE(f.Find("w"), nullptr) << metadata;
    std::vector<std::byte> copy;
    EXPECT_EQ(f.View(*f.Find("w"), &copy).width(), 2) << metadata;
  }
  // Also when it follows the tensors, or its key is written with an escape.
  EXPECT_EQ(ParseError(RawSafetensors(
                R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"__metadata__":null})", 1)),
            "");
  EXPECT_EQ(ParseError(RawSafetensors(R"({"\u005f_metadata__":null})", 0)), "");
}

// `image` with its header rewritten to carry "__metadata__": null, as some
// writers produce; same tensors, same data section.
std::vector<std::byte> WithNullMetadata(const std::vector<std::byte>& image) {
  const SafetensorsFile f = SafetensorsFile::Parse(image, "in");
  nlohmann::ordered_json header = {{"__metadata__", nullptr}};
  for (const SafetensorsTensor& t : f.tensors()) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  uint64_t old_len = 0;
  for (int i = 7; i >= 0; --i) old_len = (old_len << 8) | std::to_integer<uint64_t>(image[i]);
  const auto data = std::span(image).subspan(8 + old_len);
  std::vector<std::byte> out = RawSafetensors(header.dump(), data.size());
  std::copy(data.begin(), data.end(), out.end() - static_cast<ptrdiff_t>(data.size()));
  return out;
}

TEST(Safetensors, NullMetadataInACheckpointShardAndAnApplyInput) {
  test::TempDir dir;
  test::FakeCheckpoint ck;
  ck.Write(dir.path());
  int rewritten = 0;
  for (const auto& [name, entry] : ck.tensors) {
    const std::string path = dir / entry.first;
    const std::string bytes = test::ReadFile(path);
    const std::vector<std::byte> image(
        reinterpret_cast<const std::byte*>(bytes.data()),
        reinterpret_cast<const std::byte*>(bytes.data()) + bytes.size());
    if (SafetensorsFile::Parse(image, path).metadata().empty()) continue;  // done already
    test::WriteFile(path, WithNullMetadata(image));
    ++rewritten;
  }
  ASSERT_GT(rewritten, 1);
  const CheckpointNorms norms = CheckpointNorms::Open(dir.path());
  EXPECT_TRUE(norms.sound()) << testing::PrintToString(norms.problems());
  EXPECT_EQ(norms.Gamma("model.norm.weight").width(), 8);

  // The input of `glmnorm apply`.
  const std::vector<std::byte> x = test::BytesOf(test::Bf16({1, 2, 3, 4, 5, 6, 7, 8}));
  const SafetensorsEntry entries[] = {{"x", "BF16", {1, 8}, x}};
  test::WriteFile(dir / "x.safetensors", WithNullMetadata(EncodeSafetensors(entries)));
  const checkpoint::HostArray array = checkpoint::ReadArray(dir / "x.safetensors", "x");
  EXPECT_EQ(array.dtype, DType::kBF16);
  EXPECT_EQ(array.shape, (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(array.data, x);

  // A valid zero-size input whose leading dimensions would overflow apply's
  // row count is refused before any arithmetic on them.
  test::WriteFile(
      dir / "huge.safetensors",
      RawSafetensors(
          R"({"x":{"dtype":"BF16","shape":[4294967296,2147483649,0,8],"data_offsets":[0,0]}})", 0));
  EXPECT_THAT([&] { checkpoint::ReadArray(dir / "huge.safetensors", "x"); },
              testing::ThrowsMessage<Error>(HasSubstr(
                  "huge.safetensors: shape [4294967296, 2147483649, 0, 8] is too large")));
}

TEST(Safetensors, UnalignedTensorsAreCopiedOrRefused) {
  // A 1-byte tensor first puts the F32 one at data offset 1; the header is
  // padded so the data section itself starts 8-aligned.
  std::string header = R"({"p":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("f":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<std::byte> image = RawSafetensors(header, 5);
  const float value = 2.5f;
  std::memcpy(image.data() + image.size() - 4, &value, 4);
  const SafetensorsFile f = SafetensorsFile::Parse(image, "u.safetensors");
  const SafetensorsTensor& t = *f.Find("f");
  ASSERT_NE(reinterpret_cast<uintptr_t>(f.Bytes(t).data()) % 4, 0u);
  std::vector<std::byte> copy;
  const ConstTensorView v = f.View(t, &copy);
  EXPECT_EQ(v.data, copy.data());
  EXPECT_EQ(*static_cast<const float*>(v.data), 2.5f);
  EXPECT_THAT([&] { f.View(t); }, testing::ThrowsMessage<Error>(HasSubstr("not aligned")));
}

// --- Bad input: one clear message each. ------------------------------------

TEST(SafetensorsBadInput, EmptyFile) {
  EXPECT_THAT(OpenError({}), AllOf(HasSubstr("t.safetensors"), HasSubstr("file is 0 bytes"),
                                   HasSubstr("too short")));
}

TEST(SafetensorsBadInput, TruncatedFile) {
  std::vector<std::byte> image = TwoTensors();
  // Cut inside the length field, inside the header, and inside the data.
  EXPECT_THAT(OpenError({image.begin(), image.begin() + 5}), HasSubstr("too short"));
  EXPECT_THAT(OpenError({image.begin(), image.begin() + 20}),
              HasSubstr("larger than the 12 bytes that follow it"));
  EXPECT_THAT(OpenError({image.begin(), image.end() - 3}), HasSubstr("outside the data section"));
}

TEST(SafetensorsBadInput, HeaderLengthLargerThanFile) {
  EXPECT_THAT(ParseError(RawSafetensors("{}", 0, 1000)),
              AllOf(HasSubstr("header length 1000"), HasSubstr("larger than the 2 bytes")));
  EXPECT_THAT(ParseError(RawSafetensors("{}", 0, ~uint64_t{0})),
              HasSubstr("header length 18446744073709551615"));
}

TEST(SafetensorsBadInput, HeaderLengthOverTheFormatsLimit) {
  // The reference's limit is 100'000'000 bytes (decimal), checked before
  // the file size; the parity test covers a real file at the limit.
  EXPECT_THAT(ParseError(RawSafetensors("{}", 0, 100'000'001)),
              HasSubstr("header length 100000001 exceeds the format's limit of 100000000 bytes"));
  EXPECT_THAT(ParseError(RawSafetensors("{}", 0, 100'000'000)),
              HasSubstr("header length 100000000 is larger than the 2 bytes"));
}

TEST(SafetensorsBadInput, NulBytesInTheHeader) {
  // nlohmann-json would stop at the NUL and take "{}" as the whole header.
  EXPECT_THAT(ParseError(RawSafetensors(std::string("{}\0\0", 4), 0)),
              HasSubstr("t.safetensors: header byte 2 is NUL"));
  EXPECT_THAT(ParseError(RawSafetensors(std::string("{}\0garbage", 10), 0)),
              HasSubstr("header byte 2 is NUL"));
}

TEST(SafetensorsBadInput, MinusZeroIsNotASize) {
  // serde_json reads -0 as a float, so the reference refuses it as a usize.
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"t":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}})", 0)),
      HasSubstr("each shape dimension must be a non-negative integer, got -0"));
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[-0,1]}})", 1)),
      HasSubstr("data_offsets begin must be a non-negative integer, got -0"));
  // In a field the reader ignores it is just a number.
  EXPECT_EQ(ParseError(RawSafetensors(
                R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":-0}})", 1)),
            "");
}

TEST(SafetensorsBadInput, MetadataOfTheWrongType) {
  EXPECT_THAT(ParseError(RawSafetensors(R"({"__metadata__":"pt"})", 0)),
              HasSubstr("__metadata__ must be a JSON object of strings or null, got \"pt\""));
  EXPECT_THAT(ParseError(RawSafetensors(R"({"__metadata__":[]})", 0)),
              HasSubstr("__metadata__ must be a JSON object of strings or null"));
  EXPECT_THAT(ParseError(RawSafetensors(R"({"__metadata__":{"k":null}})", 0)),
              HasSubstr("__metadata__ value of \"k\" is not a string, got null"));
  EXPECT_THAT(ParseError(RawSafetensors(R"({"__metadata__":null,"__metadata__":null})", 0)),
              HasSubstr("duplicate key \"__metadata__\""));
}

TEST(SafetensorsBadInput, HeaderNotJson) {
  EXPECT_THAT(ParseError(RawSafetensors("hello world", 0)),
              HasSubstr("header is not a JSON object"));
  EXPECT_THAT(ParseError(RawSafetensors("{\"a\": [1, 2", 0)),
              AllOf(HasSubstr("t.safetensors: header: not valid JSON"), HasSubstr("parse error")));
  EXPECT_THAT(ParseError(RawSafetensors("{\"a\": \"\xff\xfe\"}", 0)), HasSubstr("not valid JSON"));
  EXPECT_THAT(ParseError(RawSafetensors("[1, 2]", 0)), HasSubstr("not a JSON object"));
  EXPECT_THAT(ParseError(RawSafetensors(R"({"t": 5})", 0)),
              HasSubstr("tensor \"t\" is not a JSON object"));
  EXPECT_THAT(ParseError(RawSafetensors(R"({"t":{"dtype":"F32","shape":[1]}})", 4)),
              HasSubstr("has no \"data_offsets\""));
  EXPECT_THAT(ParseError(RawSafetensors(R"({"__metadata__":{"k":1}})", 0)),
              HasSubstr("__metadata__ value of \"k\" is not a string"));
  EXPECT_THAT(ParseError(RawSafetensors(R"({"t":{"dtype":"F32","shape":[[[[[1]]]]]}})", 0)),
              HasSubstr("nested deeper"));
}

TEST(SafetensorsBadInput, OffsetsOutsideTheDataOrNegative) {
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4)),
      HasSubstr("data_offsets [0, 8] outside the data section of 4 bytes"));
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4)),
      HasSubstr("data_offsets begin must be a non-negative integer, got -4"));
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8)),
      HasSubstr("outside the data section"));
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0.5,4]}})", 4)),
      HasSubstr("must be a non-negative integer, got 0.5"));
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 8)),
      HasSubstr("data_offsets must be [begin, end]"));
  EXPECT_THAT(
      ParseError(RawSafetensors(
          R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551611,18446744073709551615]}})",
          4)),
      HasSubstr("outside the data section of 4 bytes"));
  EXPECT_THAT(
      ParseError(RawSafetensors(
          R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616]}})", 4)),
      HasSubstr("data_offsets end must be a non-negative integer"));
}

TEST(SafetensorsBadInput, OverlappingTensors) {
  EXPECT_THAT(ParseError(RawSafetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                        12)),
              AllOf(HasSubstr("tensors \"a\" and \"b\" overlap"), HasSubstr("bytes 4 to 8")));
}

TEST(SafetensorsBadInput, HolesInTheDataSection) {
  EXPECT_THAT(ParseError(RawSafetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                        12)),
              HasSubstr("4 bytes before tensor \"b\" belong to no tensor"));
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 10)),
      HasSubstr("6 bytes at the end of the data section belong to no tensor"));
}

TEST(SafetensorsBadInput, ShapeTimesDtypeIsNotTheByteRange) {
  EXPECT_THAT(ParseError(RawSafetensors(
                  R"({"t":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]}})", 10)),
              HasSubstr("shape [2, 3] of BF16 is 12 bytes but data_offsets span 10 bytes"));
}

TEST(SafetensorsBadInput, ShapeProductOverflows) {
  EXPECT_THAT(
      ParseError(RawSafetensors(
          R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0)),
      HasSubstr("shape [4294967296,4294967296] of F32 is too large (its size in bits overflows"));
  // Multiplying by the element size in bits overflows too (2^58 x 64 = 2^64).
  EXPECT_THAT(ParseError(RawSafetensors(
                  R"({"t":{"dtype":"F64","shape":[288230376151711744],"data_offsets":[0,0]}})", 0)),
              HasSubstr("too large (its size in bits overflows 64 bits)"));
  // A zero after the overflow does not undo it (the reference multiplies in
  // order and stops at the overflow).
  EXPECT_THAT(
      ParseError(RawSafetensors(
          R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", 0)),
      HasSubstr("too large"));
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0)),
      HasSubstr("each shape dimension must be a non-negative integer"));
}

TEST(SafetensorsBadInput, UnknownDtype) {
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"t":{"dtype":"Q3_K","shape":[1],"data_offsets":[0,1]}})", 1)),
      HasSubstr("tensor \"t\": unknown dtype \"Q3_K\""));
  EXPECT_THAT(
      ParseError(RawSafetensors(R"({"t":{"dtype":"bf16","shape":[1],"data_offsets":[0,2]}})", 2)),
      HasSubstr("unknown dtype \"bf16\""));
}

TEST(SafetensorsBadInput, DuplicateTensorName) {
  EXPECT_THAT(ParseError(RawSafetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                        R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                        8)),
              HasSubstr("duplicate key \"a\""));
}

TEST(SafetensorsBadInput, MissingFileNamesThePath) {
  EXPECT_THAT(
      [] { SafetensorsFile::Open("/nonexistent/x.safetensors"); },
      testing::ThrowsMessage<Error>(
          AllOf(HasSubstr("/nonexistent/x.safetensors: cannot open"), HasSubstr("No such file"))));
}

TEST(SafetensorsBadInput, ViewRefusesZeroSizeTensorsWithHugeDimensions) {
  // Valid in the file (the product is 0), but strides of a view would
  // overflow int64.
  const SafetensorsFile f = SafetensorsFile::Parse(
      RawSafetensors(
          R"({"t":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]},)"
          R"("u":{"dtype":"F32","shape":[4294967296,0,5],"data_offsets":[0,0]}})",
          0),
      "v");
  std::vector<std::byte> copy;
  EXPECT_THAT([&] { f.View(*f.Find("t"), &copy); },
              testing::ThrowsMessage<Error>(
                  HasSubstr("shape [0, 4294967296, 4294967296], too large to view (its non-zero")));
  const ConstTensorView u = f.View(*f.Find("u"), &copy);
  EXPECT_EQ(u.rows(), 0);
  EXPECT_EQ(u.stride[0], 0);
}

TEST(SafetensorsBadInput, ViewRefusesOtherDtypes) {
  const SafetensorsFile f = SafetensorsFile::Parse(
      RawSafetensors(R"({"t":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", 8), "v");
  EXPECT_THAT([&] { f.View(*f.Find("t")); },
              testing::ThrowsMessage<Error>(HasSubstr("has dtype I32")));
}

// --- Stricter than the reference (docs/CHECKPOINTS.md) ----------------------
// Files the reference accepts and glmnorm refuses on purpose; the parity
// test (safetensors_parity.py, STRICTER) holds one corpus file per rule.

TEST(SafetensorsStricter, HeaderMustStartWithABrace) {
  for (const char* header : {" {}", "\n{}", "\t{}"}) {
    EXPECT_THAT(ParseError(RawSafetensors(header, 0)),
                HasSubstr("header is not a JSON object (it must start with '{')"));
  }
}

TEST(SafetensorsStricter, DuplicateKeysAnywhere) {
  // The reference keeps the last of each, silently.
  EXPECT_THAT(ParseError(RawSafetensors(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                        R"("a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                                        1)),
              HasSubstr("header: duplicate key \"a\""));
  EXPECT_THAT(ParseError(RawSafetensors(R"({"__metadata__":{"k":"1","k":"2"}})", 0)),
              HasSubstr("duplicate key \"k\""));
  EXPECT_THAT(ParseError(RawSafetensors(
                  R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1,"x":2}})", 1)),
              HasSubstr("duplicate key \"x\""));
}

TEST(SafetensorsStricter, TensorEntryMustBeAnObject) {
  // serde would also read the struct from an array.
  EXPECT_THAT(ParseError(RawSafetensors(R"({"t":["U8",[1],[0,1]]})", 1)),
              HasSubstr("tensor \"t\" is not a JSON object with dtype, shape and data_offsets, "
                        "got [\"U8\",[1],[0,1]]"));
}

TEST(SafetensorsStricter, UnknownFieldsNestAtMostFourLevels) {
  EXPECT_EQ(ParseError(RawSafetensors(
                R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":{"a":[1]}}})", 1)),
            "");
  EXPECT_THAT(ParseError(RawSafetensors(
                  R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":{"a":[[1]]}}})", 1)),
              HasSubstr("header: JSON nested deeper than 4 levels"));
}

TEST(SafetensorsStricter, AtMost64Dimensions) {
  const auto header = [](int rank) {
    std::string dims;
    for (int i = 0; i < rank; ++i) dims += i ? ",1" : "1";
    return R"({"t":{"dtype":"U8","shape":[)" + dims + R"(],"data_offsets":[0,1]}})";
  };
  EXPECT_EQ(ParseError(RawSafetensors(header(64), 1)), "");
  EXPECT_THAT(ParseError(RawSafetensors(header(65), 1)),
              HasSubstr("tensor \"t\": shape has 65 dimensions; at most 64 are supported"));
}

TEST(SafetensorsStricter, DimensionsFitInInt64) {
  EXPECT_EQ(ParseError(RawSafetensors(
                R"({"t":{"dtype":"U8","shape":[0,9223372036854775807],"data_offsets":[0,0]}})", 0)),
            "");
  EXPECT_THAT(
      ParseError(RawSafetensors(
          R"({"t":{"dtype":"U8","shape":[0,9223372036854775808],"data_offsets":[0,0]}})", 0)),
      HasSubstr("shape [0,9223372036854775808] has a dimension above 2^63-1"));
}

TEST(SafetensorsWriter, RefusesInconsistentEntries) {
  const std::vector<std::byte> three(3);
  const SafetensorsEntry bad_size[] = {{"t", "F32", {1}, three}};
  EXPECT_THAT([&] { EncodeSafetensors(bad_size); },
              testing::ThrowsMessage<Error>(HasSubstr("3 bytes given")));
  const std::vector<std::byte> four(4);
  const SafetensorsEntry dup[] = {{"t", "F32", {1}, four}, {"t", "F32", {1}, four}};
  EXPECT_THAT([&] { EncodeSafetensors(dup); },
              testing::ThrowsMessage<Error>(HasSubstr("used twice")));
}

}  // namespace
}  // namespace glmnorm
