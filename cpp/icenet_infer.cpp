// icenet_infer: run an exported neural_arch model (TorchScript) on one input tensor file.
//
// Run:  icenet_infer MODEL.ts INPUT.bin [OUTPUT.bin]
//   (build and full example: cpp/README.md; MODEL.ts from neural_arch.export.export_torchscript,
//    INPUT.bin from neural_arch.export.write_tensor_file)
//
// Prints "shape d0 d1 ..." on the first line. Without OUTPUT.bin it then prints every output
// value, one per line, as %.8e (9 significant digits: a float32 round-trips exactly). With
// OUTPUT.bin it writes the output there in the tensor file format instead (for full-size
// grids, where millions of printed lines would be slow) and prints only the shape.
//
// Tensor file format (little-endian): int64 ndim, ndim x int64 dims, prod(dims) float32
// values in row-major order. Exit codes: 0 ok, 1 runtime error, 2 usage error.

#include <torch/script.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int64_t kMaxNdim = 8;  // same limit as neural_arch/export.py

bool little_endian() {
  const uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

torch::Tensor read_tensor_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot open input file " + path);
  const auto size = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  int64_t ndim = -1;
  if (size < 8 || !in.read(reinterpret_cast<char*>(&ndim), 8) || ndim < 1 || ndim > kMaxNdim) {
    throw std::runtime_error(path + " is not a tensor file: header says " + std::to_string(ndim) +
                             " dims, expected 1 to " + std::to_string(kMaxNdim));
  }
  std::vector<int64_t> dims(ndim);
  if (!in.read(reinterpret_cast<char*>(dims.data()), 8 * ndim)) {
    throw std::runtime_error(path + " is truncated inside its shape header");
  }
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 0) throw std::runtime_error(path + " has a negative dimension in its header");
    count *= d;
  }
  const int64_t expected = 8 * (1 + ndim) + 4 * count;
  if (size != expected) {
    // Why check the size: a mismatch means a wrong file or shape, and reading on would
    // silently run the model on garbage.
    throw std::runtime_error(path + " has " + std::to_string(size) + " bytes; its header's shape needs " +
                             std::to_string(expected));
  }
  torch::Tensor x = torch::empty(dims, torch::kFloat32);
  in.read(reinterpret_cast<char*>(x.data_ptr<float>()), 4 * count);
  return x;
}

void write_tensor_file(const torch::Tensor& y, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const int64_t ndim = y.dim();
  out.write(reinterpret_cast<const char*>(&ndim), 8);
  for (int64_t d : y.sizes()) out.write(reinterpret_cast<const char*>(&d), 8);
  out.write(reinterpret_cast<const char*>(y.data_ptr<float>()), 4 * y.numel());
  if (!out.flush()) throw std::runtime_error("could not write output file " + path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.ts INPUT.bin [OUTPUT.bin]\n", argv[0]);
    return 2;
  }
  if (!little_endian()) {
    std::fprintf(stderr, "icenet_infer: error: the tensor file format is little-endian; this host is not\n");
    return 1;
  }
  try {
    torch::jit::script::Module module;
    try {
      module = torch::jit::load(argv[1], torch::kCPU);
    } catch (const c10::Error& e) {
      // Why rethrow: the loader's message never names the file, and swapped arguments are common.
      throw std::runtime_error(std::string("cannot load ") + argv[1] +
                               " as a TorchScript model (is it MODEL.ts, given first?): " +
                               e.what_without_backtrace());
    }
    module.eval();
    const torch::Tensor x = read_tensor_file(argv[2]);
    torch::Tensor y;
    {
      torch::NoGradGuard no_grad;  // inference only: no autograd graph, less memory
      y = module.forward({x}).toTensor();
    }
    y = y.to(torch::kCPU, torch::kFloat32).contiguous();

    std::string shape = "shape";
    for (int64_t d : y.sizes()) shape += " " + std::to_string(d);
    std::printf("%s\n", shape.c_str());
    if (argc == 4) {
      write_tensor_file(y, argv[3]);
    } else {
      const float* v = y.data_ptr<float>();
      for (int64_t i = 0; i < y.numel(); ++i) std::printf("%.8e\n", static_cast<double>(v[i]));
    }
    if (std::fflush(stdout) != 0) throw std::runtime_error("could not write to stdout");
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "icenet_infer: error: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "icenet_infer: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
