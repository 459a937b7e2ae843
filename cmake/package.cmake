# The Debian package (docs/install.md): `make package` configures build-package/ (portable: MOE_NATIVE=OFF, the
# kernels for AVX2/AVX-512/AMX chosen at run time; no CUDA, whose toolkit is no Debian package; prefix /usr),
# builds it and runs CPack's DEB generator there: build-package/moe_<version>_<arch>.deb, which
# `apt install ./moe_<version>_<arch>.deb` installs with its dependencies. Contents: what cmake --install puts
# (cmake/install.cmake): moe-sim, moe-diverge and libexec/moe/moe-sim-mpi, the trained model, the scenarios and
# the corpus script under /usr/share/moe, libmoe.so, the static libraries, headers, CMake and pkg-config files,
# and the Python module in /usr/lib/python3/dist-packages.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME moe)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "moe developers <moe@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Mixture-of-Experts router simulator and deterministic MoE runtime")
set(CPACK_PACKAGE_DESCRIPTION
    "moe-sim simulates Mixture-of-Experts routing under any capacity policy and measures drop rates, "
    "displacement by strangers and the output divergence of a small trained MoE decoder (shipped, with its "
    "tokenizer). The runtime - libmoe.so with a C API, static C++ libraries, a Python module on numpy - gives a "
    "request the same bits whatever else shares its batch.")
string(REPLACE ";" "" CPACK_PACKAGE_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_STRIP_FILES ON)

# Depends: the shared libraries the programs and libmoe.so link (libc6, libstdc++6, libgcc-s1, libgomp1,
# libdnnl2, libxxhash0, libopenmpi3) from dpkg-shlibdeps (dpkg-dev, scripts/install-deps.sh), then what is
# loaded rather than linked: the Python the module was built for (its ABI tag names the minor version) and numpy.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(moe_package_depends)
if(TARGET moe_python)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_FOUND)
    math(EXPR moe_python_next "${Python3_VERSION_MINOR} + 1")
    set(moe_package_depends "python3 (>= ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}), python3 (<< ${Python3_VERSION_MAJOR}.${moe_python_next}), python3-numpy")
  endif()
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${moe_package_depends}")
# Recommends (apt installs them by default): the KJV text that `moe-sim diverge` prepares its held-out prompts
# from at first use (share/moe/scripts/fetch-corpus.sh runs bible-kjv's `bible`; bible-kjv depends on
# bible-kjv-text), and mpirun for sweeps spread over ranks.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "bible-kjv (>= 4.38), bible-kjv-text, openmpi-bin")
# Suggests: what a C++ consumer of the static libraries needs (find_package(moe) and pkg-config moe look for
# these), and torch for the drop-in torch module (moe.torch_module).
set(CPACK_DEBIAN_PACKAGE_SUGGESTS
    "libeigen3-dev, nlohmann-json3-dev, libxxhash-dev, libdnnl-dev, pkg-config, python3-torch")

# libmoe.so's shlibs entry, for packages that link it (CPack's postinst runs ldconfig for it). Written here
# rather than by CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS, which also inspects the Python module (a plugin without a
# SONAME) and warns.
if(TARGET moe_shared)
  file(WRITE ${PROJECT_BINARY_DIR}/debian/shlibs
       "libmoe ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR} moe (>= ${PROJECT_VERSION})\n")
  set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/debian/shlibs)
  set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
endif()
include(CPack)
