// Every driver function the CUDA runtime and the toolkit's libraries resolve is modelled by
// the simulated GPU, or listed with the reason it is not (src/sim/cuda/not_modelled.txt).
//
// The resolve set is measured: the runtime (cudart_client_shared) and every library
// (cudart_libs: cuBLAS, cuBLASLt, cuRAND, cuFFT, cuSPARSE, cuSOLVER, cuDNN, NCCL, each with
// its own copy of the runtime) run on the simulated GPU with every cuGetProcAddress logged,
// and the symbols they were handed are collected. Which of the simulated driver's exports
// are not modelled is read from its dynamic symbol table: those are weak definitions, every
// modelled function a strong one (docs/simulated-gpu.md).
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cudart_support.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

struct Exports {
  std::set<std::string> weak;    // not modelled: answer CUDA_ERROR_NOT_SUPPORTED
  std::set<std::string> strong;  // modelled
  std::string error;
};

// The defined functions of a shared object's dynamic symbol table, by binding.
Exports ReadExports(const std::string& path) {
  Exports out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    out.error = "cannot open " + path;
    if (fd >= 0) close(fd);
    return out;
  }
  void* map = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    out.error = "cannot map " + path;
    return out;
  }
  const auto* base = static_cast<const unsigned char*>(map);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  if (size_t(st.st_size) < sizeof(Elf64_Ehdr) || std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
      eh->e_ident[EI_CLASS] != ELFCLASS64) {
    out.error = path + " is not a 64-bit ELF file";
  } else {
    const auto* sections = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; ++i) {
      if (sections[i].sh_type != SHT_DYNSYM) continue;
      const Elf64_Shdr& strtab = sections[sections[i].sh_link];
      const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + sections[i].sh_offset);
      const size_t n = sections[i].sh_size / sizeof(Elf64_Sym);
      for (size_t k = 0; k < n; ++k) {
        if (syms[k].st_shndx == SHN_UNDEF || ELF64_ST_TYPE(syms[k].st_info) != STT_FUNC) continue;
        std::string name(reinterpret_cast<const char*>(base + strtab.sh_offset + syms[k].st_name));
        if (ELF64_ST_BIND(syms[k].st_info) == STB_WEAK) out.weak.insert(name);
        if (ELF64_ST_BIND(syms[k].st_info) == STB_GLOBAL) out.strong.insert(name);
      }
    }
  }
  munmap(map, size_t(st.st_size));
  return out;
}

// not_modelled.txt: name -> its reason.
std::map<std::string, std::string> ReadReasons(const std::string& path, std::string* error) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  if (!in) {
    *error = "cannot read " + path;
    return out;
  }
  std::string reason, line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    if (line.front() == '[') {
      if (line.back() != ']' || line.size() < 3) {
        *error = path + ":" + std::to_string(n) + ": an unclosed or empty reason";
        return out;
      }
      reason = line.substr(1, line.size() - 2);
      continue;
    }
    if (reason.empty()) {
      *error = path + ":" + std::to_string(n) + ": " + line + " has no reason above it";
      return out;
    }
    if (!out.emplace(line, reason).second) {
      *error = path + ":" + std::to_string(n) + ": " + line + " is listed twice";
      return out;
    }
  }
  return out;
}

// The symbols cuGetProcAddress handed out while `args` ran: "... -> found <symbol>".
std::set<std::string> Resolved(const std::string& program, const std::vector<std::string>& args,
                               const std::string& state, std::string* out) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1",
                                   CudartProgram(program)};
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess p(argv, {{"HAMI_SIM_STATE", state},
                      {"HAMI_SIM_PROFILE", ""},
                      {"HAMI_SIM_LOG_LEVEL", "4"},
                      {"LD_LIBRARY_PATH", HAMI_SIM_LIB_DIR},
                      {"LD_PRELOAD", ""},
                      {"CUDA_VISIBLE_DEVICES", ""}});
  *out = p.ReadAll(300000);  // bounds, not expectations
  EXPECT_EQ(p.Wait(300000), 0) << program << " failed";
  std::set<std::string> symbols;
  std::istringstream lines(*out);
  const std::string found = "-> found ";
  for (std::string line; std::getline(lines, line);) {
    if (line.find("cuGetProcAddress") == std::string::npos) continue;
    size_t at = line.find(found);
    if (at != std::string::npos) symbols.insert(line.substr(at + found.size()));
  }
  return symbols;
}

TEST(ResolveSet, EveryFunctionTheRuntimeAndLibrariesResolveIsModelledOrHasAReason) {
  if (std::string reason = CudartSkipReason(); !reason.empty()) GTEST_SKIP() << reason;
  Exports exports = ReadExports(std::string(HAMI_SIM_LIB_DIR) + "/libcuda.so.1");
  ASSERT_TRUE(exports.error.empty()) << exports.error;
  ASSERT_GT(exports.strong.size(), 300u) << "the modelled functions are strong definitions";
  ASSERT_GT(exports.weak.size(), 50u) << "the unmodelled ones weak";
  std::string error;
  const std::map<std::string, std::string> reasons = ReadReasons(HAMI_SIM_NOT_MODELLED, &error);
  ASSERT_TRUE(error.empty()) << error;

  const std::string state = SimEnv::NewStatePath();
  std::string out;
  std::set<std::string> resolved = Resolved("cudart_client_shared", {"devices"}, state, &out);
  ASSERT_GT(resolved.size(), 300u) << "the runtime resolves the driver at start:\n"
                                   << out.substr(0, 4000);
  std::vector<std::string> libraries = {"cublas",   "cublaslt", "cublaslt-fp16", "curand", "cufft",
                                        "cusparse", "cusolver", "cudnn",         "nccl"};
  std::set<std::string> more = Resolved("cudart_libs", libraries, state, &out);
  resolved.insert(more.begin(), more.end());

  for (const std::string& symbol : resolved) {
    if (exports.weak.count(symbol) == 0) continue;
    EXPECT_TRUE(reasons.count(symbol) != 0)
        << symbol << " is resolved by the runtime or a library and answers "
        << "CUDA_ERROR_NOT_SUPPORTED: model it, or say why not in src/sim/cuda/not_modelled.txt";
  }
  for (const auto& [name, why] : reasons) {
    EXPECT_TRUE(exports.weak.count(name) != 0 || exports.strong.count(name) == 0)
        << name << " is modelled now: take it out of src/sim/cuda/not_modelled.txt";
    EXPECT_TRUE(exports.weak.count(name) != 0 || exports.strong.count(name) != 0)
        << name << " (not_modelled.txt) is not an export of the simulated driver";
  }
}

}  // namespace
}  // namespace hami::testing
