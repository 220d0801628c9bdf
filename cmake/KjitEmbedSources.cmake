# Script mode: cmake -DROOT=<kernel_sources dir> -DOUT=<generated .cc> -DFILES=<a;b;c> -P this
# Writes a .cc holding every file as a byte array (no raw-string delimiter can collide with it),
# sorted by relative path, behind the table declared in runtime/kernels/kernel_sources_embedded.h.
cmake_minimum_required(VERSION 3.25)
list(SORT FILES)
set(body "")
set(table "")
set(i 0)
foreach(rel IN LISTS FILES)
  file(READ "${ROOT}/${rel}" hex HEX)
  string(LENGTH "${hex}" hex_len)
  math(EXPR size "${hex_len} / 2")
  # 16 bytes a line (CMake regexes have no {n}: spell the 32 hex digits out).
  string(REPEAT "[0-9a-f]" 32 line_re)
  string(REGEX REPLACE "(${line_re})" "\\1\n" hex "${hex}")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
  string(APPEND body "constexpr char kFile${i}[] = {\n${bytes}'\\0'};\n")
  string(APPEND table "    {\"${rel}\", kFile${i}, ${size}},\n")
  math(EXPR i "${i} + 1")
endforeach()
set(content "// Generated from kernel_sources/ at build time. Do not edit.
#include \"runtime/kernels/kernel_sources_embedded.h\"

namespace kjit::kernels::embedded {
namespace {
${body}}  // namespace

const File kFiles[] = {
${table}    {nullptr, nullptr, 0},
};
const size_t kNumFiles = ${i};

}  // namespace kjit::kernels::embedded
")
# Rewrite only on change, so an unchanged tree does not recompile.
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL content)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${content}")
