// Forecasts from an rnnfleet ONNX file in C++ with ONNX Runtime's C++ API.
//   g++ -std=c++17 -O2 forecast.cpp -I<onnxruntime>/include -L<onnxruntime>/lib -lonnxruntime -o forecast
//   ./forecast exports/EURUSD_1m.onnx recent_bars.csv
// recent_bars.csv: 1-minute bars, oldest first, with a header naming open, high, low, close and
// volume (other columns are skipped), in the time zone the model was trained in (metadata
// "timezone"). Written for docs/export.md and not compiled by rnnfleet's tests: ONNX Runtime's
// C++ headers and library are not in the package registries its test machines reach.
#include <onnxruntime_cxx_api.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

static std::vector<std::string> split(const std::string& text, char delimiter) {
    std::vector<std::string> fields;
    std::stringstream stream(text);
    for (std::string field; std::getline(stream, field, delimiter);) fields.push_back(field);
    return fields;
}

// The bars' open, high, low, close, volume (in `columns` order) from a CSV with a header, as doubles.
static std::vector<std::vector<double>> read_bars(const std::string& path, const std::vector<std::string>& columns) {
    std::ifstream file(path);
    std::string line;
    std::getline(file, line);
    std::vector<std::string> header = split(line, ',');
    std::vector<size_t> positions;
    for (const auto& name : columns) {
        auto found = std::find(header.begin(), header.end(), name);
        if (found == header.end()) throw std::runtime_error(path + ": no column " + name + " in its header");
        positions.push_back(found - header.begin());
    }
    std::vector<std::vector<double>> bars;
    while (std::getline(file, line)) {
        std::vector<std::string> fields = split(line, ',');
        std::vector<double> bar;
        for (size_t position : positions) bar.push_back(std::stod(fields.at(position)));
        bars.push_back(bar);
    }
    return bars;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s model.onnx recent_bars.csv\n", argv[0]);
        return 2;
    }
    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "rnnfleet");
    Ort::Session session(env, argv[1], Ort::SessionOptions());
    Ort::AllocatorWithDefaultOptions allocator;
    Ort::ModelMetadata metadata = session.GetModelMetadata();
    auto meta = [&](const char* key) {
        return std::string(metadata.LookupCustomMetadataMapAllocated(key, allocator).get());
    };
    const int64_t window = std::stoll(meta("window_bars"));  // seq_len + 1
    const std::vector<std::string> columns = split(meta("input_columns"), ',');
    const auto bars = read_bars(argv[2], columns);
    if (static_cast<int64_t>(bars.size()) < window) {
        std::fprintf(stderr, "%s: %zu bars, the model needs the last %lld\n", argv[2], bars.size(), (long long)window);
        return 1;
    }
    // The input is double: the prices as the platform has them ([1, window, 5], oldest bar first).
    std::vector<double> input;
    for (size_t t = bars.size() - window; t < bars.size(); t++) input.insert(input.end(), bars[t].begin(), bars[t].end());
    const std::vector<int64_t> shape = {1, window, static_cast<int64_t>(columns.size())};
    auto memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
    Ort::Value tensor = Ort::Value::CreateTensor<double>(memory, input.data(), input.size(), shape.data(), shape.size());

    // Every output, taken by its name (a quantile model has one more than a point model).
    std::vector<std::string> names;
    for (size_t i = 0; i < session.GetOutputCount(); i++) names.push_back(session.GetOutputNameAllocated(i, allocator).get());
    std::vector<const char*> name_pointers;
    for (const auto& name : names) name_pointers.push_back(name.c_str());
    const std::string input_name = meta("input_name");
    const char* input_names[] = {input_name.c_str()};
    auto outputs = session.Run(Ort::RunOptions{nullptr}, input_names, &tensor, 1, name_pointers.data(), names.size());
    std::map<std::string, const float*> by_name;
    for (size_t i = 0; i < names.size(); i++) by_name[names[i]] = outputs[i].GetTensorData<float>();

    const auto horizons = split(meta("horizons"), ',');
    const auto coverages = split(meta("interval_coverages"), ',');
    std::printf("%s: %s from the bar closing at %.10g\n", meta("dataset").c_str(), meta("target").c_str(), bars.back()[3]);
    for (size_t k = 0; k < horizons.size(); k++) {
        std::printf("  %s bar(s) ahead: %+.9g", horizons[k].c_str(), by_name["forecast"][k]);
        if (by_name.count("forecast_close")) std::printf(" (close %.9g)", by_name["forecast_close"][k]);
        // lower and upper are [batch, horizons, intervals].
        if (by_name.count("lower") && !coverages.empty())
            std::printf("; %s interval [%+.6g, %+.6g]", coverages[0].c_str(), by_name["lower"][k * coverages.size()],
                        by_name["upper"][k * coverages.size()]);
        std::printf("\n");
    }
    return 0;
}
