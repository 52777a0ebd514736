// The safetensors reader and writer, and every malformed-file case.
#include "glmnorm/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "fixtures.h"
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
  for (const char* dtype : {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16", "U16",
                            "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"}) {
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
}

TEST(Safetensors, ZeroSizedTensorsAndEmptyHeaderAreValid) {
  EXPECT_EQ(ParseError(RawSafetensors(R"({"e":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},)"
                                      R"("s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
                                      4)),
            "");
  EXPECT_EQ(ParseError(RawSafetensors("{}", 0)), "");
  EXPECT_EQ(ParseError(RawSafetensors("{}      ", 0)), "");  // space padding
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
      HasSubstr("more elements than fit in 64 bits"));
  // Multiplying by the element size overflows too.
  EXPECT_THAT(
      ParseError(RawSafetensors(
          R"({"t":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0)),
      HasSubstr("more elements than fit in 64 bits"));
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

TEST(SafetensorsBadInput, ViewRefusesOtherDtypes) {
  const SafetensorsFile f = SafetensorsFile::Parse(
      RawSafetensors(R"({"t":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8), "v");
  EXPECT_THAT([&] { f.View(*f.Find("t")); },
              testing::ThrowsMessage<Error>(HasSubstr("has dtype I64")));
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
