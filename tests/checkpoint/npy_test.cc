// .npy reading and writing (the CLI's array format).
#include "npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "array_file.h"
#include "fixtures.h"
#include "glmnorm/error.h"

namespace glmnorm::checkpoint {
namespace {

using ::testing::HasSubstr;

std::vector<std::byte> Npy(const std::string& header, size_t data_bytes, int version = 1) {
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  if (version == 1) {
    out += static_cast<char>(header.size() & 0xFF);
    out += static_cast<char>(header.size() >> 8);
  } else {
    for (int i = 0; i < 4; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  }
  out += header;
  out.append(data_bytes, '\0');
  const auto* p = reinterpret_cast<const std::byte*>(out.data());
  return {p, p + out.size()};
}

std::string NpyError(const std::vector<std::byte>& image) {
  try {
    ParseNpy(image, "a.npy");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Npy, RoundTripsEveryDtype) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const std::vector<int64_t> shape = {2, 3};
    std::vector<std::byte> data(6 * SizeOf(dtype));
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 7);
    const std::vector<std::byte> file = EncodeNpy(dtype, shape, data);
    EXPECT_EQ((10 + std::to_integer<size_t>(file[8])) % 64, 0u);  // NumPy's 64-byte alignment
    const NpyArray a = ParseNpy(file, "rt.npy");
    EXPECT_EQ(a.dtype, dtype);
    EXPECT_EQ(a.shape, shape);
    ASSERT_EQ(a.data_bytes, data.size());
    EXPECT_EQ(std::memcmp(file.data() + a.data_offset, data.data(), data.size()), 0);
  }
}

TEST(Npy, HeaderTextMatchesNumpy) {
  const std::vector<std::byte> data(4 * 5);
  const std::vector<int64_t> one_d = {5};
  const std::vector<std::byte> file = EncodeNpy(DType::kF32, one_d, data);
  const std::string want = "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }";
  const std::string text(reinterpret_cast<const char*>(file.data()) + 10, want.size());
  EXPECT_EQ(text, want);
  const std::vector<int64_t> scalar = {};
  EXPECT_EQ(ParseNpy(EncodeNpy(DType::kF16, scalar, std::vector<std::byte>(2)), "s").shape.size(),
            0u);
}

TEST(Npy, ReadsBf16AsU2AndVersions2And3) {
  const std::string header = "{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }\n";
  const NpyArray a = ParseNpy(Npy(header, 8, 2), "v2");
  EXPECT_EQ(a.dtype, DType::kBF16);
  EXPECT_EQ(a.data_offset, 12u + header.size());
  EXPECT_EQ(
      ParseNpy(Npy("{\"descr\": \"<f2\", \"fortran_order\": False, \"shape\": (1, 2)}", 4, 3), "v3")
          .shape,
      (std::vector<int64_t>{1, 2}));
}

TEST(NpyBadInput, EachGivesOneClearMessage) {
  EXPECT_THAT(NpyError({}), HasSubstr("a.npy: not a .npy file"));
  EXPECT_THAT(NpyError(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 4)),
              HasSubstr("shape needs 8 bytes of data, file has 4"));
  EXPECT_THAT(NpyError(Npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 8)),
              HasSubstr("dtype '<f8' is not supported"));
  EXPECT_THAT(NpyError(Npy("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4)),
              HasSubstr("'>f4' is not supported"));
  EXPECT_THAT(NpyError(Npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16)),
              HasSubstr("Fortran order"));
  EXPECT_THAT(NpyError(Npy("{'descr': '<f4', 'shape': (1,), }", 4)),
              HasSubstr("lacks descr, fortran_order or shape"));
  EXPECT_THAT(NpyError(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4)),
              HasSubstr("unexpected key 'x'"));
  EXPECT_THAT(NpyError(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 4)),
              HasSubstr("expected a dimension"));
  EXPECT_THAT(
      NpyError(
          Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 0)),
      HasSubstr("is too big"));
  EXPECT_THAT(NpyError(Npy("{'descr': '<f4', 'fortran_order': Fals", 0)),
              HasSubstr("expected True or False"));
  std::vector<std::byte> long_header = Npy("{}", 0);
  long_header[8] = std::byte{0xFF};
  EXPECT_THAT(NpyError(long_header), HasSubstr("header length 255 is larger than the file"));
  std::vector<std::byte> v9 = Npy("{}", 0);
  v9[6] = std::byte{9};
  EXPECT_THAT(NpyError(v9), HasSubstr("version 9 is not supported"));
}

// NumPy refuses an array whose element size times its non-zero dimensions
// exceeds 2^63 - 1 bytes, even when another dimension is 0 (checked with
// numpy 2.4: "array is too big"); the reader refuses the same shapes and
// accepts the rest, without overflow.
TEST(Npy, RefusesTheShapesNumPyRefusesEvenWhenEmpty) {
  auto header = [](const std::string& descr, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  };
  const std::string too_big = "too big: its non-zero dimensions times the element size";
  EXPECT_THAT(NpyError(Npy(header("<f4", "(0, 4611686018427387904, 4611686018427387904)"), 0)),
              HasSubstr(too_big));
  EXPECT_THAT(NpyError(Npy(header("<u2", "(0, 4611686018427387904)"), 0)), HasSubstr(too_big));
  EXPECT_THAT(NpyError(Npy(header("<f4", "(0, 2305843009213693952)"), 0)), HasSubstr(too_big));
  EXPECT_THAT(NpyError(Npy(header("<f4", "(0, 9223372036854775807)"), 0)), HasSubstr(too_big));
  EXPECT_THAT(NpyError(Npy(header("<f4", "(0, 1152921504606846976, 2)"), 0)), HasSubstr(too_big));
  EXPECT_THAT(NpyError(Npy(header("<f4", "(0, 9223372036854775808)"), 0)),
              HasSubstr("dimension too large"));
  // Within the limit: empty arrays of that shape.
  for (const auto& [descr, shape] :
       std::vector<std::pair<std::string, std::string>>{{"<f4", "(0, 2305843009213693951)"},
                                                        {"<u2", "(0, 2305843009213693952)"},
                                                        {"<f4", "(2305843009213693951, 0)"},
                                                        {"<u2", "(0, 1152921504606846976, 2)"}}) {
    SCOPED_TRACE(descr + " " + shape);
    const std::vector<std::byte> image = Npy(header(descr, shape), 0);
    const NpyArray a = ParseNpy(image, "a.npy");
    EXPECT_EQ(a.data_bytes, 0u);
    EXPECT_EQ(a.data_offset, image.size());
  }
  // The writer checks the same way.
  const std::vector<int64_t> huge = {0, int64_t{1} << 62, int64_t{1} << 62};
  EXPECT_THAT([&] { EncodeNpy(DType::kF32, huge, {}); },
              testing::ThrowsMessage<Error>(HasSubstr("is invalid or too big")));
  const std::vector<int64_t> empty = {0, int64_t{1} << 40, 16};
  EXPECT_EQ(ParseNpy(EncodeNpy(DType::kF32, empty, {}), "e.npy").shape, empty);
}

TEST(ArrayFile, ChoosesTheFormatByExtension) {
  EXPECT_EQ(FormatOf("a/b.npy"), ArrayFormat::kNpy);
  EXPECT_EQ(FormatOf("b.safetensors"), ArrayFormat::kSafetensors);
  EXPECT_THAT([] { FormatOf("b.bin"); },
              testing::ThrowsMessage<Error>(HasSubstr("b.bin: unknown file type")));
}

TEST(ArrayFile, ReadsBothFormatsAndNamesMissingTensors) {
  test::TempDir dir;
  HostArray a;
  a.dtype = DType::kBF16;
  a.shape = {2, 2};
  a.data = test::BytesOf(test::Bf16({1, 2, 3, 4}));
  for (const char* name : {"a.npy", "a.safetensors"}) {
    test::WriteFile(dir / name, EncodeArray(dir / name, "x", a));
    const HostArray b = ReadArray(dir / name, "x");
    EXPECT_EQ(b.dtype, a.dtype) << name;
    EXPECT_EQ(b.shape, a.shape) << name;
    EXPECT_EQ(b.data, a.data) << name;
  }
  EXPECT_THAT([&] { ReadArray(dir / "a.safetensors", "y"); },
              testing::ThrowsMessage<Error>(HasSubstr("no tensor \"y\" (it has: x)")));
}

}  // namespace
}  // namespace glmnorm::checkpoint
