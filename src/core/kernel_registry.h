// The static catalog of compiled CUDA kernel units. Each src/<pipeline>/inst/<name>.cu defines one
// entry with CAKEMOE_KERNEL_UNIT(<name>, ...); CMake lists the units it compiled in a generated
// header, so the catalog holds exactly what was built (CAKEMOE_KERNELS=ci|all) and the linker keeps
// every unit. Plain C++: the planners read it without CUDA headers.
#pragma once

#include <string>
#include <vector>

namespace cakemoe {
namespace core {

/// A launcher with its signature erased. NOTE: a function pointer type, not void*: converting a
/// function pointer to another function pointer type and back is well-defined C++ (g++ and
/// clang), while a cast from an object pointer is only conditionally supported.
using ErasedLauncher = void (*)();

/// One compiled kernel unit. `launch` is the unit's launcher; its signature is fixed per
/// (pipeline, stage) by the header that declares that stage's params (cast it there only, with
/// reinterpret_cast to that launcher type).
struct KernelUnit {
  const char* name;      ///< the inst/ file name, e.g. "stepfun_fc1_nvfp4"
  const char* pipeline;  ///< "stepfun" | "bgmv"
  const char* stage;    ///< "routing", "fc1", "requant", "fc2", "finalize", "shrink", "expand", ...
  const char* variant;  ///< family name ("nvfp4", ...) or dtype ("bf16", "fp16"); "" when unused
  int size;             ///< tile (stepfun; 0 = any tile) or rank (bgmv; 0 = any rank)
  const char* arch;     ///< "sm90a" (Hopper-only unit) or "portable" (sm_90a, sm_100a, sm_103a)
  ErasedLauncher launch;
};

/// Every unit of this build (empty without CUDA).
const std::vector<const KernelUnit*>& kernel_units();

/// True when `unit` also carries compute_80 PTX (CAKEMOE_PORTABLE_PTX builds: the StepFun units
/// and the BGMV portable pair), so a device of compute capability >= 8.0 without native code in
/// this build (anything but 9.0, 10.0 and 10.3) can run it from the driver's JIT.
bool kernel_unit_has_ptx(const KernelUnit& unit);

/// The unit named `name` (its inst/ file name), or nullptr.
const KernelUnit* find_kernel_unit_by_name(const std::string& name);

/// The unit for (pipeline, stage, variant, size): an exact `size` match is preferred over a
/// size-0 ("any") unit; a "sm90a" unit is only returned when `sm90` is true and is preferred
/// there. nullptr when none.
const KernelUnit* find_kernel_unit(const std::string& pipeline, const std::string& stage,
                                   const std::string& variant, int size, bool sm90);

}  // namespace core
}  // namespace cakemoe

/// Defines the catalog entry of one inst/ file. `name` must equal the file name (without .cu).
#define CAKEMOE_KERNEL_UNIT(name, pipeline, stage, variant, size, arch, launch)         \
  const ::cakemoe::core::KernelUnit* cakemoe_kernel_unit_##name() {                     \
    using Erased = ::cakemoe::core::ErasedLauncher;                                     \
    static const ::cakemoe::core::KernelUnit unit{                                      \
        #name, pipeline, stage, variant, size, arch, reinterpret_cast<Erased>(launch)}; \
    return &unit;                                                                       \
  }
