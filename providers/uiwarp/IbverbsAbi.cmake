# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Which rdma-core private provider ABI (PABI) the provider is built for: that of the libibverbs
# it is built against. libibverbs loads only lib<name>-rdmav<PABI>.so and silently skips a
# provider built for another one, so the PABI is read off the installed library, never assumed.
#
# Sets:
#   UIWARP_LIBIBVERBS           the libibverbs.so.1 found (its real path)
#   UIWARP_RDMA_CORE_MAJOR      rdma-core release of the libibverbs (libibverbs.pc: 1.<n>.<rel>.<x>)
#   UIWARP_IBVERBS_PABI         its IBVERBS_PRIVATE_<n> symbol version (libibverbs.so.1's .dynstr)
#   UIWARP_PROVIDER_SUFFIX      -rdmav<PABI>.so, what libibverbs appends to a driver name
#   UIWARP_PROVIDER_FILE        libuiwarp-rdmav<PABI>.so
#   UIWARP_LIBIBVERBS_FIRST/_NEXT  the rdma-core releases [FIRST, NEXT) that share this build's
#                               provider layout (the bounds the Debian package puts on libibverbs1)
# and writes ${CMAKE_BINARY_DIR}/uiwarp-abi.env (KEY=value lines) for debian/rules and the tests.

# The provider layouts uiwarp knows, from rdma-core's history (libibverbs/driver.h and
# CMakeLists.txt's IBVERBS_PABI_VERSION at each release tag): "FIRST:LAST:PABI". A layout changes
# when verbs_context_ops gains a member, which rdma-core did within a PABI twice (35 -> 36 in PABI
# 34, 61 -> 62 in PABI 59), so the release, not only the PABI, selects the layout.
# providers/uiwarp/verbs_abi.h declares each of them; keep the two in step.
set(_uiwarp_layouts
    "35:35:34"  # ops table without query_qp_data_in_order
    "36:56:34"  # Debian 12 (44.0), Debian 13 (56.1)
    "57:58:57"  # ibv_cmd_get_context gained an fd array; ops unchanged
    "59:61:59"  # + alloc_dmah, dealloc_dmah, reg_mr_ex; Ubuntu 26.04 (61)
    "62:63:59"  # + dm_export_dmabuf_fd, query_port_speed, with no new PABI
    "64:64:64"  # + alloc_buf, free_buf
    "65:65:65"  # + ten completion-counter ops; Debian sid (65.0)
)

function(_uiwarp_ibverbs_abi)
  # The rdma-core release: libibverbs.pc's version is 1.<IBVERBS_1.x minor>.<PACKAGE_VERSION>.
  if(NOT IBVERBS_VERSION MATCHES "^1\\.[0-9]+\\.([0-9]+)\\.")
    message(FATAL_ERROR "libibverbs.pc says version '${IBVERBS_VERSION}', not rdma-core's "
                        "1.<minor>.<release>.<n>: cannot tell which rdma-core this is")
  endif()
  set(release ${CMAKE_MATCH_1})

  # The PABI: the IBVERBS_PRIVATE_<n> version node, a string in libibverbs.so.1's .dynstr.
  # The library the provider links: pkg_check_modules resolved it to a full path.
  list(FILTER IBVERBS_LINK_LIBRARIES INCLUDE REGEX "/libibverbs\\.so")
  if(NOT IBVERBS_LINK_LIBRARIES)
    message(FATAL_ERROR "pkg-config found libibverbs but not libibverbs.so (${IBVERBS_LIBDIR})")
  endif()
  list(GET IBVERBS_LINK_LIBRARIES 0 _lib)
  get_filename_component(lib "${_lib}" REALPATH)
  file(STRINGS "${lib}" nodes REGEX "^IBVERBS_PRIVATE_[0-9]+$")
  list(REMOVE_DUPLICATES nodes)
  list(LENGTH nodes n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "${lib} should define one IBVERBS_PRIVATE_<n> symbol version, "
                        "found '${nodes}'")
  endif()
  string(REPLACE "IBVERBS_PRIVATE_" "" pabi "${nodes}")

  set(layout "")
  foreach(entry IN LISTS _uiwarp_layouts)
    string(REPLACE ":" ";" entry "${entry}")
    list(GET entry 0 first)
    list(GET entry 1 last)
    if(release GREATER_EQUAL first AND release LESS_EQUAL last)
      set(layout ${entry})
    endif()
  endforeach()
  if(NOT layout)
    message(FATAL_ERROR
            "libibverbs ${IBVERBS_VERSION} (${lib}) is rdma-core ${release} with the private "
            "provider ABI IBVERBS_PRIVATE_${pabi}, which uiwarp does not know: its provider would "
            "not be loaded, or would be loaded with a wrong ops table. uiwarp knows rdma-core "
            "35 to 65 (PABI 34, 57, 59, 64, 65). Declare the new layout from rdma-core's "
            "libibverbs/driver.h in providers/uiwarp/verbs_abi.h and providers/uiwarp/IbverbsAbi.cmake.")
  endif()
  list(GET layout 0 first)
  list(GET layout 1 last)
  list(GET layout 2 known_pabi)
  if(NOT pabi STREQUAL known_pabi)
    message(FATAL_ERROR "${lib} is rdma-core ${release}, whose private provider ABI is "
                        "IBVERBS_PRIVATE_${known_pabi}, but it exports IBVERBS_PRIVATE_${pabi}: "
                        "a patched libibverbs uiwarp does not know")
  endif()
  math(EXPR next "${last} + 1")

  set(UIWARP_LIBIBVERBS ${lib} PARENT_SCOPE)
  set(UIWARP_RDMA_CORE_MAJOR ${release} PARENT_SCOPE)
  set(UIWARP_IBVERBS_PABI ${pabi} PARENT_SCOPE)
  set(UIWARP_PROVIDER_SUFFIX "-rdmav${pabi}.so" PARENT_SCOPE)
  set(UIWARP_PROVIDER_FILE "libuiwarp-rdmav${pabi}.so" PARENT_SCOPE)
  set(UIWARP_LIBIBVERBS_FIRST ${first} PARENT_SCOPE)
  set(UIWARP_LIBIBVERBS_NEXT ${next} PARENT_SCOPE)
  file(WRITE ${CMAKE_BINARY_DIR}/uiwarp-abi.env
       "RDMA_CORE=${release}\nPABI=${pabi}\nPROVIDER=libuiwarp-rdmav${pabi}.so\n"
       "LIBIBVERBS_FIRST=${first}\nLIBIBVERBS_NEXT=${next}\n")
  message(STATUS "libibverbs: rdma-core ${release}, IBVERBS_PRIVATE_${pabi}: building "
                 "libuiwarp-rdmav${pabi}.so (the layout of rdma-core ${first} to ${last})")
endfunction()

find_package(PkgConfig REQUIRED)
pkg_check_modules(IBVERBS REQUIRED IMPORTED_TARGET GLOBAL libibverbs)
_uiwarp_ibverbs_abi()
