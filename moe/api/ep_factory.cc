#include "moe/api/ep_factory.h"

#include <stdexcept>

#include "moe/api/builders.h"
#include "moe/parallel/expert_parallel_layer.h"
#include "moe/parallel/single_process_communicator.h"
#if MOE_API_WITH_MPI
#include "moe/parallel/mpi_communicator.h"
#endif

namespace moe::api {
namespace {

// An ExpertParallelLayer with the communicator it runs on (destroyed after the layer).
class OwningEpLayer final : public Layer {
 public:
  OwningEpLayer(std::unique_ptr<parallel::Communicator> comm,
                std::unique_ptr<parallel::ExpertParallelLayer> layer)
      : comm_(std::move(comm)), layer_(std::move(layer)) {}
  void forward(const float* x, int num_tokens, std::span<const TokenMeta> meta, float* y, RoutingState* state,
               MoEStats* stats) override {
    layer_->forward(x, num_tokens, meta, y, state, stats);
  }
  const MoELayerConfig& config() const override { return layer_->config(); }
  const io::LayerWeights& weights() const override { return layer_->weights(); }
  int64_t hidden() const override { return layer_->hidden(); }
  const DispatchPlan& last_plan() override { return layer_->last_plan(); }
  Fingerprint fingerprint() const override { return layer_->fingerprint(); }
  const parallel::ExpertParallelLayer& ep() const { return *layer_; }

 private:
  std::unique_ptr<parallel::Communicator> comm_;
  std::unique_ptr<parallel::ExpertParallelLayer> layer_;
};

std::unique_ptr<parallel::Communicator> make_comm(const std::string& backend) {
  if (backend == "single") return std::make_unique<parallel::SingleProcessCommunicator>();
#if MOE_API_WITH_MPI
  if (backend == "mpi") {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
      // Nobody started MPI (a Python program without mpi4py): start it for the life of the process.
      static parallel::MpiSession session(nullptr, nullptr);
    }
    return std::make_unique<parallel::MpiCommunicator>(MPI_COMM_WORLD);
  }
#endif
  throw std::logic_error("unreachable: ExpertParallelSpec::check rejects backend '" + backend + "'");
}

std::optional<parallel::ExpertPlacement> placement_of(const ExpertParallelSpec& spec, int num_experts,
                                                      int world_size) {
  if (spec.physical_to_logical.empty()) return std::nullopt;
  return parallel::ExpertPlacement::from_physical(spec.physical_to_logical, num_experts, world_size);
}

parallel::ExpertParallelOptions options_of(const ExpertParallelSpec& spec) {
  parallel::ExpertParallelOptions o;
  o.planning = parallel::parse_ep_planning(spec.planning);
  return o;
}

}  // namespace

void ExpertParallelSpec::check(const std::string& backend, const std::string& planning) {
  (void)parallel::parse_ep_planning(planning);
  if (backend.empty() || backend == "single") return;
#if MOE_API_WITH_MPI
  if (backend == "mpi") return;
  throw std::invalid_argument("expert parallel backend '" + backend + "' is not one of: single, mpi");
#else
  throw std::invalid_argument("expert parallel backend '" + backend + "' is not one of: single" +
                              (backend == "mpi" ? std::string(" (this build has no MPI)") : std::string()));
#endif
}

std::unique_ptr<Layer> make_expert_parallel_layer(const ExpertParallelSpec& spec, MoELayerConfig config,
                                                  std::shared_ptr<const io::LayerWeights> weights) {
  auto comm = make_comm(spec.backend);
  const int E = config.router.num_experts;
  auto layer = std::make_unique<parallel::ExpertParallelLayer>(
      std::move(config), std::move(weights), *comm, placement_of(spec, E, comm->size()), options_of(spec));
  return std::make_unique<OwningEpLayer>(std::move(comm), std::move(layer));
}

std::unique_ptr<Layer> make_expert_parallel_layer(const LayerOptions& options,
                                                  const std::filesystem::path& dir, int layer_index) {
  auto comm = make_comm(options.expert_parallel.backend);
  // Opening the directory may fail on some ranks only: agreed before the layer's collective constructor.
  std::optional<io::Pretrained> p;
  MoELayerConfig config;
  std::exception_ptr error;
  try {
    p = io::open_pretrained(dir);
    const LayerOptions o = pretrained_options(options, p->config);
    config = make_config(o, p->config.layer.num_experts);
  } catch (...) {
    error = std::current_exception();
  }
  std::vector<size_t> outcome(comm->size());
  comm->all_gather_sizes(error ? 1 : 0, outcome);
  if (error) std::rethrow_exception(error);
  for (int r = 0; r < comm->size(); ++r) {
    if (outcome[r] != 0) {
      throw std::invalid_argument("expert parallel layer: rank " + std::to_string(r) + " could not open " +
                                  dir.string() + " (see its message)");
    }
  }
  const int E = config.router.num_experts;
  auto layer = std::make_unique<parallel::ExpertParallelLayer>(
      config, io::pretrained_part_reader(std::move(*p), layer_index, options.storage), *comm,
      placement_of(options.expert_parallel, E, comm->size()), options_of(options.expert_parallel));
  return std::make_unique<OwningEpLayer>(std::move(comm), std::move(layer));
}

std::optional<ExpertParallelInfo> expert_parallel_info(const Layer& layer) {
  const auto* owning = dynamic_cast<const OwningEpLayer*>(&layer);
  if (owning == nullptr) return std::nullopt;
  const parallel::ExpertParallelLayer& ep = owning->ep();
  return ExpertParallelInfo{ep.communicator().rank(), ep.communicator().size(), ep.plans_locally(),
                            ep.local_experts(), ep.weights_ptr()};
}

}  // namespace moe::api
