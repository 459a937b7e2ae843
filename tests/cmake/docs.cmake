# The documentation's shell examples (scripts/doc-examples.py, docs/doc-examples.md): every `$ ...` example with
# output in these files is run in a fresh work directory and compared with its documented output; a change of
# output fails its test. Label `docs` (not under the sanitizers: they run the release build's programs).
# The runner's own test (doc_examples_self_test) checks that a changed output, exit status or set-up fails.
if(TARGET moe-sim AND TARGET write_family_checkpoints)
  foreach(doc README.md docs/cli.md docs/divergence.md docs/runtime.md docs/fuzzing.md docs/embedding.md)
    get_filename_component(name ${doc} NAME_WE)
    string(TOLOWER ${name} name)
    add_test(NAME doc_examples_${name}
             COMMAND ${moe_test_python} ${PROJECT_SOURCE_DIR}/scripts/doc-examples.py --build ${CMAKE_BINARY_DIR}
                     ${PROJECT_SOURCE_DIR}/${doc})
    # The corpus: moe-sim diverge reads build/share/moe/kjv, the fixture's directory.
    set_tests_properties(doc_examples_${name} PROPERTIES LABELS docs TIMEOUT 600 FIXTURES_REQUIRED kjv_corpus)
  endforeach()
  # The lab runs 2 threads (docs/divergence.md: `moe-sim diverge --threads 2`).
  set_tests_properties(doc_examples_divergence PROPERTIES PROCESSORS 2)
  # docs/embedding.md installs build/ (cmake --install writes build/install_manifest.txt, as install_test does).
  set_tests_properties(doc_examples_embedding PROPERTIES RESOURCE_LOCK build_install)
  # The prose: every scope, mode and preset name in the documents, docstrings and headers against the code
  # (policy_facts prints what the code has), and the numbers the prose quotes rerun.
  add_executable(policy_facts ${PROJECT_SOURCE_DIR}/tests/tools/policy_facts.cc)
  target_include_directories(policy_facts PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(policy_facts PRIVATE moe_model moe_layer moe_router nlohmann_json::nlohmann_json moe_flags)
  add_test(NAME docs_prose_test COMMAND ${moe_test_python} ${PROJECT_SOURCE_DIR}/tests/docs_prose_test.py
                                        ${CMAKE_BINARY_DIR})
  set_tests_properties(docs_prose_test PROPERTIES LABELS docs TIMEOUT 300)
  # The figures: every SVG the project writes (moe-sim's line plots, the layer benchmark's bars, docs/img)
  # rendered by rsvg-convert (librsvg2-bin) and measured: parses, every label inside the view box, no series
  # hidden under another.
  add_test(NAME svg_render_test COMMAND ${moe_test_python} ${PROJECT_SOURCE_DIR}/tests/svg_render_test.py
                                        ${CMAKE_BINARY_DIR})
  set_tests_properties(svg_render_test PROPERTIES LABELS docs TIMEOUT 300 FIXTURES_REQUIRED kjv_corpus)
  add_test(NAME doc_examples_self_test
           COMMAND ${moe_test_python} ${PROJECT_SOURCE_DIR}/tests/doc_examples_test.py ${CMAKE_BINARY_DIR})
  set_tests_properties(doc_examples_self_test PROPERTIES LABELS docs TIMEOUT 120)
endif()
