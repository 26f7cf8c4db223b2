export * from './dms2iceberg';
export * from './code';
export * from './tables';
export { dashboardBody, DashboardInputs } from './dashboard';
