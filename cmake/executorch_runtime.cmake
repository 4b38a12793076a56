# ExecuTorch's C++ runtime (src/runtime/executorch), linked against the libraries and headers the
# executorch wheel of the project's venv ships (libexecutorch: runtime + Module; the kernel library,
# and the XNNPACK backend, linked whole: they register themselves from static initialisers). AUTO uses it when present,
# ON requires it, OFF leaves it out (the executorch format then runs through python/hfx_executorch_runner.py).
# The wheel's CMake package needs CMake 3.28; its files are used directly here.
set(HFX_EXECUTORCH_RUNTIME AUTO CACHE STRING "ExecuTorch C++ runtime driver: AUTO, ON or OFF")
set_property(CACHE HFX_EXECUTORCH_RUNTIME PROPERTY STRINGS AUTO ON OFF)
set(HFX_EXECUTORCH_HINT "pip install executorch==1.5.1 into .venv (with torch==2.13.0 pinned) and reconfigure")
set(HFX_HAVE_EXECUTORCH_RUNTIME OFF)
if(NOT HFX_EXECUTORCH_RUNTIME STREQUAL "OFF")
  set(_hfx_py "${CMAKE_SOURCE_DIR}/.venv/bin/python")
  if(EXISTS "${_hfx_py}")
    execute_process(COMMAND "${_hfx_py}" -c "import importlib.util as u;print(list(u.find_spec('executorch').submodule_search_locations)[0])"
      OUTPUT_VARIABLE _hfx_et_pkg OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _hfx_et_rc)
  endif()
  if(_hfx_et_rc EQUAL 0 AND EXISTS "${_hfx_et_pkg}/lib/libexecutorch.so" AND EXISTS "${_hfx_et_pkg}/include/executorch/extension/module/module.h")
    file(STRINGS "${_hfx_et_pkg}/version.py" _hfx_et_version_line REGEX "^__version__")
    string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" HFX_EXECUTORCH_VERSION "${_hfx_et_version_line}")
    set(HFX_HAVE_EXECUTORCH_RUNTIME ON)
    message(STATUS "hfx: ExecuTorch ${HFX_EXECUTORCH_VERSION} C++ runtime from ${_hfx_et_pkg}")
  elseif(HFX_EXECUTORCH_RUNTIME STREQUAL "ON")
    message(FATAL_ERROR "HFX_EXECUTORCH_RUNTIME=ON but the executorch wheel was not found: ${HFX_EXECUTORCH_HINT}")
  else()
    message(STATUS "hfx built without ExecuTorch's C++ runtime: ${HFX_EXECUTORCH_HINT}")
  endif()
endif()

# hfx_executorch_runtime(TARGET): the driver's sources, headers and libraries on TARGET.
function(hfx_executorch_runtime target)
  if(NOT HFX_HAVE_EXECUTORCH_RUNTIME)
    return()
  endif()
  file(GLOB _srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/runtime/executorch/*.cc)
  target_sources(${target} PRIVATE ${_srcs})
  # SYSTEM: the wheel's headers are not held to hfx's warnings.
  target_include_directories(${target} SYSTEM PRIVATE ${_hfx_et_pkg}/include ${_hfx_et_pkg}/include/executorch/runtime/core/portable_type/c10)
  target_compile_definitions(${target} PUBLIC HFX_HAVE_EXECUTORCH_RUNTIME=1 HFX_EXECUTORCH_VERSION="${HFX_EXECUTORCH_VERSION}")
  target_compile_definitions(${target} PRIVATE C10_USING_CUSTOM_GENERATED_MACROS)
  # The kernels and the XNNPACK backend register themselves from static initialisers: linked whole.
  target_link_libraries(${target} PUBLIC "-Wl,--no-as-needed" ${_hfx_et_pkg}/lib/libexecutorch_kernels_optimized.so
    ${_hfx_et_pkg}/lib/libexecutorch_backend_xnnpack.so ${_hfx_et_pkg}/lib/libexecutorch_threadpool.so "-Wl,--as-needed"
    ${_hfx_et_pkg}/lib/libexecutorch.so)
endfunction()
if(HFX_HAVE_EXECUTORCH_RUNTIME)
  set(CMAKE_BUILD_RPATH "${CMAKE_BUILD_RPATH};${_hfx_et_pkg}/lib")
  set(CMAKE_INSTALL_RPATH "${CMAKE_INSTALL_RPATH};${_hfx_et_pkg}/lib")
endif()
