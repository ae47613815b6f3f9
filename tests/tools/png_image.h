// Test helper: reads a PNG file into RGB pixels, independently of whatever wrote it (zlib for
// the IDAT stream, the PNG specification's five row filters). Only what plotting libraries
// write: 8-bit RGB or RGBA, not interlaced. std::runtime_error naming the file otherwise, and
// on a bad signature, a missing IHDR or a stream that does not inflate to the image's size.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata::testing {

struct PngImage {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::vector<std::array<std::uint8_t, 3>> pixels;  // row-major, alpha dropped
};

namespace png_detail {

inline std::uint32_t big_endian(const std::string& bytes, std::size_t at) {
  return (std::uint32_t{static_cast<std::uint8_t>(bytes[at])} << 24) |
         (std::uint32_t{static_cast<std::uint8_t>(bytes[at + 1])} << 16) |
         (std::uint32_t{static_cast<std::uint8_t>(bytes[at + 2])} << 8) |
         std::uint32_t{static_cast<std::uint8_t>(bytes[at + 3])};
}

// The Paeth predictor of the PNG specification (filter type 4).
inline int paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return a;
  return pb <= pc ? b : c;
}

}  // namespace png_detail

inline PngImage read_png(const std::string& path) {
  using png_detail::big_endian;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot be opened");
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.size() < 8 || file.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) {
    throw std::runtime_error(path + ": no PNG signature");
  }
  PngImage image;
  int channels = 0;
  std::string idat;
  for (std::size_t at = 8; at + 12 <= file.size();) {
    const std::uint32_t length = big_endian(file, at);
    const std::string type = file.substr(at + 4, 4);
    if (at + 12 + length > file.size()) throw std::runtime_error(path + ": chunk past the end");
    const std::string data = file.substr(at + 8, length);
    if (type == "IHDR") {
      image.width = big_endian(data, 0);
      image.height = big_endian(data, 4);
      const int depth = static_cast<std::uint8_t>(data[8]);
      const int colour = static_cast<std::uint8_t>(data[9]);
      const int interlace = static_cast<std::uint8_t>(data[12]);
      if (depth != 8 || (colour != 2 && colour != 6) || interlace != 0) {
        throw std::runtime_error(path + ": not 8-bit non-interlaced RGB or RGBA");
      }
      channels = colour == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat += data;
    } else if (type == "IEND") {
      break;
    }
    at += 12 + length;
  }
  if (channels == 0) throw std::runtime_error(path + ": no IHDR");

  const std::size_t stride = std::size_t{image.width} * channels;
  std::vector<std::uint8_t> raw((stride + 1) * image.height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()),
                 idat.size()) != Z_OK ||
      raw_size != raw.size()) {
    throw std::runtime_error(path + ": IDAT does not inflate to width x height");
  }
  std::vector<std::uint8_t> previous(stride, 0), row(stride);
  image.pixels.reserve(std::size_t{image.width} * image.height);
  for (std::uint32_t y = 0; y < image.height; ++y) {
    const std::uint8_t filter = raw[y * (stride + 1)];
    const std::uint8_t* line = &raw[y * (stride + 1) + 1];
    for (std::size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<std::size_t>(channels) ? row[i - channels] : 0;
      const int b = previous[i];
      const int c = i >= static_cast<std::size_t>(channels) ? previous[i - channels] : 0;
      int predicted = 0;
      switch (filter) {
        case 0: predicted = 0; break;
        case 1: predicted = a; break;
        case 2: predicted = b; break;
        case 3: predicted = (a + b) / 2; break;
        case 4: predicted = png_detail::paeth(a, b, c); break;
        default: throw std::runtime_error(path + ": unknown row filter");
      }
      row[i] = static_cast<std::uint8_t>(line[i] + predicted);
    }
    for (std::uint32_t x = 0; x < image.width; ++x) {
      const std::uint8_t* p = &row[std::size_t{x} * channels];
      image.pixels.push_back({p[0], p[1], p[2]});
    }
    previous = row;
  }
  return image;
}

// The colours (not greys: channels differing by at least 64) that cover at least
// `min_pixels` pixels: what a plot's bars and lines add to its black, white and grey frame.
// Text, grid lines and antialiased edges are greys or cover few pixels each.
inline int colours_covering(const PngImage& image, int min_pixels) {
  std::map<std::array<std::uint8_t, 3>, int> counts;
  for (const auto& p : image.pixels) {
    const int hi = std::max({p[0], p[1], p[2]}), lo = std::min({p[0], p[1], p[2]});
    if (hi - lo >= 64) ++counts[p];
  }
  int covering = 0;
  for (const auto& [colour, n] : counts) covering += n >= min_pixels ? 1 : 0;
  return covering;
}

}  // namespace strata::testing
